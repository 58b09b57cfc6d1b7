"""`mrbench history report`: each metric's trend per comparable group, with the first run
of every new regime marked (change points from mrbench.harness.checks.changepoint), as one
self-contained HTML file like a run's report, and the verdict on the newest run.

Which metrics: the candidate side's P99s, syncs/ops/allocations per step, accuracy,
agreement and acceptance length (the figures a nightly regression moves). Practical
thresholds differ by kind: deterministic counts and accuracy mark any change; latency and
throughput need `latency_min_rel`.

Latency is judged as the candidate/baseline *ratio* of each run, not the candidate's own
figure: both sides of a run are interleaved wave by wave on the same machine, so the ratio
cancels the machine's speed, which on a shared CPU runner drifts by tens of percent from
one night (or one hour) to the next and moved a 4-prompt P99 E2EL by 20 % in CI with no code
change. The absolute series is still plotted; `absolute_latency=True` judges it instead
(for a dedicated, stable GPU host where a regression of both runners matters too).

Attribution: every change names its first run's date and candidate build (the vLLM commit
and version the run recorded; for the bundled runner, mrbench's git sha, whose code it is)
and the last good build, the run before it. The x axis is labelled the same way (date and
commit), in run order.

The newest run (what `history report` exits 1 on, `newest_change`): a change that the
newest run of a group *starts* (a one-run step at the end of the series: possible where the
values are exact, like op counts, or the series is long) or *confirms* (the latest change of
the series, which the series without its newest run did not show: a noisy metric needs two
runs of the new regime, min_size, before its step can be significant). Either way the
change is reported once, on the night it becomes visible, and names its first bad commit;
the next night, the same change is known and does not fail again.
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt

from ..checks.changepoint import ChangePoint, detect
from ..record import history
from .formatting import fmt_num
from .html import environment, fig_to_data_uri, write_atomic

TRENDED = ("p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms", "p99_step_ms",
           "median_step_ms", "output_throughput", *history.CHECK_METRICS)
COUNTS = ("syncs_per_step", "ops_per_step", "allocs_per_step", "accuracy_strict",
          "token_agreement", "mean_acceptance_length", "state_audit_violations",
          "unwarmed_dispatch")
MAX_TICKS = 10          # x labels per plot: a long history shows every n-th run and its changes


def thresholds(metric: str, latency_min_rel: float) -> dict:
    if metric in COUNTS:
        return dict(min_rel=math.inf, min_abs=1e-9)        # exact figures: any change
    return dict(min_rel=latency_min_rel)


def build_of(run: dict) -> str:
    """The candidate's build of a run in words: "vLLM 1a2b3c4d5e (0.26.1)", "bundled
    runner, mrbench 9f8e7d6c5b", or what is known."""
    commit, version = run.get("candidate_vllm_commit"), run.get("candidate_vllm_version")
    sha = (run.get("git_sha") or "?")[:10]
    # two builds of one release and commit (a PR's tree, a fault written back) differ only
    # by their folders
    folder = f", build {run['candidate_build']}" if run.get("candidate_build") else ""
    if commit:
        return f"vLLM {commit[:10]}" + (f" ({version}{folder})" if version else
                                        f" ({folder[2:]})" if folder else "")
    if version:
        return f"vLLM {version} (no commit recorded{folder})"
    if run.get("target") == "bundled":
        return f"bundled runner, mrbench {sha}"
    return f"no vLLM build recorded, mrbench {sha}"


def tick_of(run: dict) -> str:
    """An x label: the run's date over its candidate's vLLM commit (else version, else
    mrbench's git sha)."""
    ident = ((run.get("candidate_vllm_commit") or "")[:7] or run.get("candidate_vllm_version")
             or (run.get("git_sha") or "?")[:7])
    return f"{(run.get('created') or '?')[:10]}\n{ident}"


def _ratio_points(cand: list, base: list) -> list:
    """(run, candidate/baseline) for the runs that have both sides and a positive baseline."""
    by_run = {run["id"]: v for run, v in base}
    return [(run, v / by_run[run["id"]]) for run, v in cand
            if by_run.get(run["id"]) and by_run[run["id"]] > 0]


def _tail_change(values: list[float], alpha: float, th: dict) -> ChangePoint | None:
    """A change that the newest value alone starts (min_size 1 at the end), where the
    regime before it has at least two runs: two lone values are no regime, and would pass
    as an exactly constant step (changepoint's noise-free rule) whatever their noise."""
    n = len(values)
    found = detect(values, alpha=alpha, min_size=1, **th)
    start = max((c.index for c in found if c.index < n - 1), default=0)
    return next((c for c in found if c.index == n - 1 and n - 1 - start >= 2), None)


def newest_change(values: list[float], changes: list[ChangePoint], alpha: float,
                  th: dict) -> ChangePoint | None:
    """The change the newest value starts or confirms (module docstring), or None.
    `changes` are detect(values)'s."""
    n = len(values)
    tail = _tail_change(values, alpha, th)
    if tail is not None:
        return tail                         # the newest run alone is a new regime
    if not changes or n < 2:
        return None
    prev = values[:-1]
    last = changes[-1]                      # the regime the newest run is in
    known = {c.index for c in detect(prev, alpha=alpha, **th)}
    if last.index >= n - 3 and (t := _tail_change(prev, alpha, th)) is not None:
        known.add(t.index)                  # (only a tail at n - 2 can be last's, +-1)
    return last if all(abs(last.index - k) > 1 for k in known) else None


def _change(wl: str, metric: str, points: list, cp: ChangePoint, newest: bool) -> dict:
    return dict(workload=wl, metric=metric, index=cp.index, run=points[cp.index][0],
                last_good=points[cp.index - 1][0] if cp.index > 0 else None, cp=cp,
                newest=newest)


def analyse(db: Path, latency_min_rel: float = 0.20, alpha: float = 0.05,
            absolute_latency: bool = False, gate_runs: list[str] | None = None) -> dict:
    """Change points of every trended candidate metric, per comparable group. Latency is
    judged on the candidate/baseline ratio unless `absolute_latency` (module docstring).
    `newest`: the changes the newest run of a group starts or confirms, over every group,
    or only the groups holding one of `gate_runs` (run directories, resolved)."""
    groups, newest = [], []
    for key, by_metric in history.series(db).items():
        g = dict(key=dict(zip(history.GROUP_KEYS, key)), series=[], changes=[])
        last_run = max((run for pts in by_metric.values() for run, _ in pts),
                       key=lambda r: (r["created"], r["id"]))
        in_group = {run["run_dir"] for pts in by_metric.values() for run, _ in pts}
        gated = gate_runs is None or bool(in_group & set(gate_runs))
        g["newest_run"] = last_run
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
            th = thresholds(metric.removesuffix(" ratio"), latency_min_rel)
            cps = detect(vals, alpha=alpha, **th)
            top = None
            if gated and points[-1][0]["id"] == last_run["id"]:
                top = newest_change(vals, cps, alpha, th)
                if top is not None and top.index not in {c.index for c in cps}:
                    cps = sorted([*cps, top], key=lambda c: c.index)   # a one-run step
            g["series"].append(dict(workload=wl, metric=metric, points=points, changes=cps))
            for cp in cps:
                c = _change(wl, metric, points, cp, newest=top is not None
                            and cp.index == top.index)
                g["changes"].append(c)
                if c["newest"]:
                    newest.append(dict(c, group=g["key"]))
        groups.append(g)
    return dict(groups=groups, n_runs=len(history.runs(db)), newest=newest)


def group_title(k: dict) -> str:
    return f"{k['suite']} · {k['target']} · {k['candidate']} vs {k['baseline']} · {k['device']}"


def _ticks(n: int, marked: list[int]) -> list[int]:
    """At most about MAX_TICKS evenly spread positions, the last and every change's."""
    step = max(1, math.ceil(n / MAX_TICKS))
    return sorted({*range(0, n, step), n - 1, *marked})


def _plot(s: dict) -> str:
    vals = [v for _, v in s["points"]]
    runs = [r for r, _ in s["points"]]
    fig, ax = plt.subplots(figsize=(4.6, 2.8))
    ax.plot(range(len(vals)), vals, "o-", ms=3, color="#2980b9")
    for cp in s["changes"]:
        ax.axvline(cp.index - 0.5, color="#c0392b", ls="--", lw=1)
        ax.annotate(tick_of(runs[cp.index]).split("\n")[1], (cp.index - 0.5, max(vals)),
                    fontsize=6, color="#c0392b", va="top",
                    ha="right" if cp.index > len(vals) / 2 else "left")
    ticks = _ticks(len(vals), [cp.index for cp in s["changes"]])
    ax.set_xticks(ticks, [tick_of(runs[i]) for i in ticks], rotation=60, ha="right",
                  fontsize=5)
    ax.set_title(f"{s['workload']} · {s['metric']}", fontsize=8)
    ax.set_xlabel("date / candidate commit", fontsize=7)
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    return fig_to_data_uri(fig)


def render(db: Path, out: Path, latency_min_rel: float = 0.20,
           absolute_latency: bool = False, gate_runs: list[str] | None = None
           ) -> tuple[Path, dict]:
    res = analyse(db, latency_min_rel, absolute_latency=absolute_latency, gate_runs=gate_runs)
    changes, groups = [], []
    for g in res["groups"]:
        k = g["key"]
        title = group_title(k)
        for c in g["changes"]:
            cp, run = c["cp"], c["run"]
            changes.append(dict(group=title, workload=c["workload"], metric=c["metric"],
                                run_number=c["index"] + 1, date=run["created"][:19],
                                build=build_of(run),
                                last_good=build_of(c["last_good"]) if c["last_good"] else "—",
                                last_good_date=(c["last_good"] or {}).get("created", "")[:19],
                                before=fmt_num(cp.before), after=fmt_num(cp.after),
                                rel=fmt_num(cp.rel_change, signed=True),
                                p=fmt_num(cp.p_value), newest=c["newest"]))
        n = max((len(s["points"]) for s in g["series"]), default=0)
        groups.append(dict(title=title, n=n, subtitle=f"model {k['model']} · newest run "
                                                      f"{g['newest_run']['created'][:19]}, "
                                                      f"{build_of(g['newest_run'])}",
                           plots=[dict(alt=f"{s['workload']} {s['metric']}", src=_plot(s))
                                  for s in g["series"]]))
    html = environment().get_template("history.html.j2").render(
        n_runs=res["n_runs"], changes=changes, groups=groups,
        newest=sum(c["newest"] for c in changes),
        method=f"E-Divisive means with a permutation test (alpha 0.05); counts and accuracy: "
               f"any change; latency and throughput: at least {latency_min_rel:.0%}, judged on "
               + ("the candidate's own figures" if absolute_latency else
                  "the candidate/baseline ratio of each run (drift-free; absolute figures "
                  "plotted for context)"))
    return write_atomic(out, html), res
