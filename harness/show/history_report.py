"""`mrbench history report`: each metric's trend per comparable group, with the first run
of every new regime marked (change points from mrbench.harness.checks.changepoint), as one
self-contained HTML file like a run's report.

Which metrics: the candidate side's P99s, syncs/ops/allocations per step, accuracy,
agreement and acceptance length (the figures a nightly regression moves). Practical
thresholds differ by kind: deterministic counts and accuracy mark any change; latency and
throughput need `latency_min_rel`.

Latency is judged as the candidate/baseline *ratio* of each run, not the candidate's own
figure: both sides of a run are interleaved wave by wave on the same machine, so the ratio
cancels the machine's speed, which on a shared CPU runner drifts by tens of percent from
one night (or one hour) to the next and moved a 4-prompt P99 E2E by 20 % in CI with no code
change. The absolute series is still plotted; `absolute_latency=True` judges it instead
(for a dedicated, stable GPU host where a regression of both runners matters too).
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt

from ..checks.changepoint import detect
from ..record import history
from .formatting import fmt_num
from .html import environment, fig_to_data_uri, write_atomic

TRENDED = ("p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms", "p99_e2e_ms", "p99_step_ms",
           "median_step_ms", "output_throughput", *history.CHECK_METRICS)
COUNTS = ("syncs_per_step", "ops_per_step", "allocs_per_step", "accuracy_strict",
          "token_agreement", "mean_acceptance_length", "state_audit_violations",
          "unwarmed_dispatch")


def thresholds(metric: str, latency_min_rel: float) -> dict:
    if metric in COUNTS:
        return dict(min_rel=math.inf, min_abs=1e-9)        # exact figures: any change
    return dict(min_rel=latency_min_rel)


def _ratio_points(cand: list, base: list) -> list:
    """(run, candidate/baseline) for the runs that have both sides and a positive baseline."""
    by_run = {run["id"]: v for run, v in base}
    return [(run, v / by_run[run["id"]]) for run, v in cand
            if by_run.get(run["id"]) and by_run[run["id"]] > 0]


def analyse(db: Path, latency_min_rel: float = 0.20, alpha: float = 0.05,
            absolute_latency: bool = False) -> dict:
    """Change points of every trended candidate metric, per comparable group. Latency is
    judged on the candidate/baseline ratio unless `absolute_latency` (module docstring)."""
    groups = []
    for key, by_metric in history.series(db).items():
        g = dict(key=dict(zip(history.GROUP_KEYS, key)), series=[], changes=[])
        for (wl, side, metric), points in sorted(by_metric.items()):
            if side != "candidate" or metric not in TRENDED:
                continue
            judged = by_metric.get((wl, "candidate", f"{history.JUDGED}{metric}"))
            if judged and not all(v for _, v in judged):
                # a P99 the run could not judge (too few independent samples for its CI, or
                # two different engines) is plotted, never trended: a P99 of a handful of
                # requests is their maximum, and its steps are noise
                g["series"].append(dict(workload=wl, metric=metric, points=points, changes=[]))
                continue
            if metric not in COUNTS and not absolute_latency:
                base = by_metric.get((wl, "baseline", metric))
                if base:
                    g["series"].append(dict(workload=wl, metric=metric, points=points,
                                            changes=[]))          # plotted, not judged
                    metric, points = f"{metric} ratio", _ratio_points(points, base)
                    if not points:
                        continue
            vals = [v for _, v in points]
            cps = detect(vals, alpha=alpha, **thresholds(metric, latency_min_rel))
            g["series"].append(dict(workload=wl, metric=metric, points=points, changes=cps))
            for cp in cps:
                run = points[cp.index][0]
                g["changes"].append(dict(workload=wl, metric=metric, index=cp.index,
                                         run=run, cp=cp))
        groups.append(g)
    return dict(groups=groups, n_runs=len(history.runs(db)))


def _plot(s: dict) -> str:
    vals = [v for _, v in s["points"]]
    fig, ax = plt.subplots(figsize=(4.6, 2.4))
    ax.plot(range(1, len(vals) + 1), vals, "o-", ms=3, color="#2980b9")
    for cp in s["changes"]:
        ax.axvline(cp.index + 1, color="#c0392b", ls="--", lw=1)
        ax.annotate(f"run {cp.index + 1}", (cp.index + 1, max(vals)), fontsize=7,
                    color="#c0392b", ha="left", va="top")
    ax.set_title(f"{s['workload']} · {s['metric']}", fontsize=8)
    ax.set_xlabel("run", fontsize=7)
    ax.tick_params(labelsize=7)
    fig.tight_layout()
    return fig_to_data_uri(fig)


def render(db: Path, out: Path, latency_min_rel: float = 0.20,
           absolute_latency: bool = False) -> tuple[Path, dict]:
    res = analyse(db, latency_min_rel, absolute_latency=absolute_latency)
    changes, groups = [], []
    for g in res["groups"]:
        k = g["key"]
        title = f"{k['suite']} · {k['target']} · {k['candidate']} vs {k['baseline']} · {k['device']}"
        for c in g["changes"]:
            cp = c["cp"]
            changes.append(dict(group=title, workload=c["workload"], metric=c["metric"],
                                run_number=c["index"] + 1, sha=(c["run"]["git_sha"] or "?")[:10],
                                date=c["run"]["created"][:19], before=fmt_num(cp.before),
                                after=fmt_num(cp.after), rel=fmt_num(cp.rel_change, signed=True),
                                p=fmt_num(cp.p_value)))
        n = max((len(s["points"]) for s in g["series"]), default=0)
        groups.append(dict(title=title, n=n, subtitle=f"model {k['model']}",
                           plots=[dict(alt=f"{s['workload']} {s['metric']}", src=_plot(s))
                                  for s in g["series"]]))
    html = environment().get_template("history.html.j2").render(
        n_runs=res["n_runs"], changes=changes, groups=groups,
        method=f"E-Divisive means with a permutation test (alpha 0.05); counts and accuracy: "
               f"any change; latency and throughput: at least {latency_min_rel:.0%}, judged on "
               + ("the candidate's own figures" if absolute_latency else
                  "the candidate/baseline ratio of each run (drift-free; absolute figures "
                  "plotted for context)"))
    return write_atomic(out, html), res
