"""report.html for a campaign directory: the fault catch matrix, or calibration's false-alarm
table with the spread of no-change deltas, or a power study's curve and table. One
self-contained file like a run's report; links point at the runs' own reports beside it.
The matrix, the power curve or the false-alarm table comes first, right under the title and
above the prose that explains it (campaign.html.j2): it is what the campaign was run for."""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from ..record.campaign_record import CleanRun, FaultMatrix
from ..record.study_record import Calibration, CalibrationCheck, Detection, PowerStudy
from . import coverage
from .formatting import fmt_exceedance, fmt_heterogeneity, fmt_num, fmt_projected_mde, fmt_realized
from .html import environment, fig_to_data_uri, write_report


def _matrix(res: FaultMatrix) -> dict:
    runs = [("clean", res.clean), *res.faults.items()]
    hits_of = {name: set(r.flagged if isinstance(r, CleanRun) else r.by) for name, r in runs}
    # a fault run's alarm on a check that alarmed clean too: shown, never counted
    also_of = {name: set(getattr(r, "alarmed_clean", [])) for name, r in runs}
    cols = sorted(set().union(*hits_of.values(), *also_of.values()))
    rows = []
    for name, r in runs:
        hits = hits_of[name]
        if isinstance(r, CleanRun):
            good, status, link = not hits, "pass" if not hits else "FALSE ALARM", "clean"
        else:
            good, link = bool(hits), r.dir or name
            status = "caught" if good else r.status.upper()
        rows.append(dict(name=name, status=status, good=good, link=f"{link}/report.html",
                         hits=["hit" if c in hits else "also" if c in also_of[name] else "miss"
                               for c in cols]))
    return dict(columns=cols, rows=rows, not_run=res.not_run)


def _calibration_plot(checks: dict[str, CalibrationCheck]) -> str | None:
    rows = [(n, c) for n, c in checks.items() if c.deltas]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 1.2))
    for i, (_, c) in enumerate(rows):
        d = np.asarray(c.deltas, dtype=float)
        ax.plot(d, np.full(d.shape, i), "o", alpha=0.6, color="#2980b9")
    ax.set_yticks(range(len(rows)), [n for n, _ in rows], fontsize=7)
    ax.axvline(0, color="#999", lw=0.8)
    ax.set_xlabel("delta of each no-change run (latency: relative P99 change)")
    fig.tight_layout()
    return fig_to_data_uri(fig)


def _power_curve(res: PowerStudy) -> Figure | None:
    """Detection rate against the slowdown, one line per judged latency check; the false
    alarm rate at 0 %."""
    rows = [(n, c) for n, c in res.checks.items() if c.judged]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    xs = [0.0, *res.pcts]
    for name, c in rows:
        ys = [c.false_alarm_rate, *(c.detection[f"{p:g}"].rate for p in res.pcts)]
        ys = [np.nan if y is None else y for y in ys]      # a setting that ran no run
        ax.plot(xs, ys, "o-", label=name, alpha=0.8)
    ax.axhline(res.power_target, color="#999", lw=0.8, ls="--")
    ax.set_xlabel("slow-step: busy work added, % of the candidate's measured step")
    ax.set_ylabel("share of runs flagged (0 %: false alarms)")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    return fig


def _estimates(res: PowerStudy) -> Figure | None:
    """Each run's estimate per judged latency check, by setting, against the check's bar:
    filled where the run flagged it. Why a rate is what it is: a miss is an estimate under
    the bar (or not significant), and the clean runs' spread is the false-alarm margin."""
    names = [n for n, c in res.checks.items() if c.judged and c.bar is not None]
    if not names:
        return None
    plans = ["clean", *(f"slow-step:{p:g}" for p in res.pcts)]
    cols = min(len(names), 4)
    nrows = -(-len(names) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(2.6 * cols + 0.6, 3.2 * nrows),
                             sharey=True, squeeze=False)
    jitter = np.random.default_rng(0)            # a fixed seed: the same file each time
    for ax, name in zip(axes.flat, names):
        for i, plan in enumerate(plans):
            pts = [(r.estimates[name][0], name in r.flagged) for r in res.runs
                   if r.plan == plan and (r.estimates.get(name) or [None])[0] is not None]
            for hit in (False, True):
                y = [100 * d for d, h in pts if h == hit]
                x = i + jitter.uniform(-0.18, 0.18, len(y))
                ax.scatter(x, y, s=16, alpha=0.8, color="#c0392b" if hit else "#2980b9",
                           facecolors=None if hit else "none",
                           label=("flagged" if hit else "not flagged") if i == 0 else None)
        ax.axhline(100 * res.checks[name].bar, color="#555", lw=0.8, ls="--")
        ax.axhline(0, color="#bbb", lw=0.6)
        ax.set_xticks(range(len(plans)), ["clean" if p == "clean" else "+" + p.split(":")[1]
                                          + " %" for p in plans], fontsize=7)
        ax.set_title(name, fontsize=8)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    axes[0][0].set_ylabel("estimate, % (dashed: the bar)")
    axes[0][0].legend(fontsize=6, loc="upper left")
    fig.tight_layout()
    return fig


def power_figures(res: PowerStudy) -> dict[str, Figure]:
    """A power study's figures by name (the report shows them; the read-back script
    saves them as PNG for docs): the power curve, and the runs' estimates."""
    figs = {"power-curve": _power_curve(res), "estimates": _estimates(res)}
    return {k: f for k, f in figs.items() if f is not None}


def _fmt_detection(d: Detection) -> str:
    return "not measured" if not d.runs else f"{d.detected}/{d.runs} ({d.rate:.0%})"


def render_campaign(camp_dir: Path, kind: str, res: FaultMatrix | Calibration | PowerStudy,
                    max_rate: float | None = None) -> Path:
    """`camp_dir`/report.html for a campaign's result (`kind`: faults, calibrate or
    power, as the command that wrote it)."""
    runs = sorted(p.name for p in camp_dir.iterdir() if (p / "summary.json").is_file())
    # what the suite exercised, from one of its runs: the clean run of a fault matrix (the
    # faults change no parameter), else the first
    shown = "clean" if "clean" in runs else (runs[0] if runs else None)
    ctx: dict = dict(runs=runs, matrix=None, calibration=None, plot=None, plots={}, power=None,
                     realized=[], heterogeneity=[], exceedance=[], coverage_run=shown,
                     coverage=coverage.run_dir_context(camp_dir / shown) if shown else None)
    if kind == "power":
        per = ", ".join(f"{k if k == 'clean' else '+' + k + ' %'} x {v}"
                        for k, v in res.runs_per_plan.items())
        ctx.update(title=f"mrbench power: {res.suite} ({per})",
                   subtitle=f"{res.candidate} (candidate) vs {res.baseline} (baseline): "
                            f"{res.method}",
                   plots={k: fig_to_data_uri(f) for k, f in power_figures(res).items()},
                   pcts=[f"{p:g}" for p in res.pcts],
                   power=[dict(name=n, threshold=c.threshold, judged=c.judged,
                               fa=f"{c.false_alarms}/{c.aa_runs}",
                               det=[_fmt_detection(c.detection[f"{p:g}"]) for p in res.pcts],
                               mde="-" if c.mde_pct is None else f"{c.mde_pct:g} %",
                               proj=fmt_projected_mde(c.projection))
                          for n, c in res.checks.items()])
        ctx["realized"] = fmt_realized(res)
    elif kind == "faults":
        ctx.update(title=f"mrbench faults: {res.suite}",
                   subtitle=f"{res.candidate} (candidate) vs {res.baseline} (baseline), "
                            f"target {res.target}", matrix=_matrix(res))
    else:
        ctx.update(title=f"mrbench calibrate: {res.suite} x {res.n}",
                   subtitle=f"{res.candidate} (candidate) vs {res.baseline} (baseline): "
                            f"{res.method}",
                   plot=_calibration_plot(res.checks),
                   calibration=[dict(name=n, alarms=f"{c.false_alarms}/{c.runs}",
                                     rate=f"{c.rate:.0%} ({c.rate_ci[0]:.0%}-"
                                          f"{c.rate_ci[1]:.0%})",
                                     judged=c.judged, dmin=fmt_num(c.delta_min),
                                     dmed=fmt_num(c.delta_median),
                                     dmax=fmt_num(c.delta_max), threshold=c.threshold,
                                     over=max_rate is not None and c.rate > max_rate,
                                     mde=fmt_projected_mde(c.projection))
                                for n, c in res.checks.items()])
    if kind != "faults":
        ctx["heterogeneity"] = fmt_heterogeneity(res.checks)
        ctx["exceedance"] = fmt_exceedance(res.checks)
    out = camp_dir / "report.html"
    write_report(out, environment().get_template("campaign.html.j2").render(**ctx))
    return out
