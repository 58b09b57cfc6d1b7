"""The run report's plots: one figure per (workload, plot), as PNG data for the HTML.

Why apart from report.py: the report reads a run and lays it out; these only draw. Each
builder takes the tables of one workload and returns a matplotlib Figure, or None when its
input is missing, empty or lacks columns (the report then notes the plot as skipped).
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..checks.stats import proportion_ci_wilson
from ..record.run_record import Check, DeltaKind, Verdict
from .formatting import (
    NOT_MEASURED,
    as_float,
    check_family,
    check_status,
    fmt_ci,
    fmt_num,
    is_missing,
    relative_bar,
    relative_change,
)

__all__ = ["PLOTS", "SIDES", "STATUS_COLORS", "workload_rows"]


SIDES = ("baseline", "candidate")
SIDE_COLORS = {"baseline": "#4C72B0", "candidate": "#DD8452"}
REGRESSION_COLOR = "#C44E52"
# a check's status (formatting.check_status) as the report's CSS colours it
STATUS_COLORS = {str(Verdict.REGRESSION): REGRESSION_COLOR, str(Verdict.ERROR): "#7D3C98",
                 NOT_MEASURED: "#D68910", str(Verdict.PASS): "#2E8B57",
                 str(Verdict.INFO): "#5D6D7E"}
PHASES = ("prepare", "forward", "sample", "postprocess", "output")
LATENCIES = (  # (title, source, column)
    ("TTFT", "requests", "ttft_ms"),
    ("TPOT", "requests", "tpot_ms"),
    ("ITL", "itl", "itl_ms"),
    ("E2EL", "requests", "e2e_ms"),
)
MAX_ECDF_POINTS = 2000
MAX_STEP_POINTS = 2000  # per line; longer step series are binned
STEP_BINS = 200




# ---------------------------------------------------------------------------------------
# small statistics
# ---------------------------------------------------------------------------------------

def _to_bool(s: pd.Series) -> pd.Series:
    """Column of bools/strings/numbers/blanks -> float 1.0/0.0/NaN."""
    true = {"true", "1", "1.0", "yes", "y", "t"}
    false = {"false", "0", "0.0", "no", "n", "f"}

    def conv(v: Any) -> float:
        if is_missing(v):
            return float("nan")
        if isinstance(v, (bool, np.bool_)):
            return 1.0 if v else 0.0
        if isinstance(v, (int, float, np.integer, np.floating)):
            return 1.0 if v else 0.0
        t = str(v).strip().lower()
        if t in true:
            return 1.0
        if t in false:
            return 0.0
        return float("nan")

    return s.map(conv).astype(float)


# ---------------------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------------------


def _num(df: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(df[col], errors="coerce")


def workload_rows(df: pd.DataFrame | None, workload: str, side: str | None = None) -> pd.DataFrame | None:
    if df is None or "workload" not in df.columns:
        return None
    m = df["workload"] == workload
    if side is not None:
        if "side" not in df.columns:
            return None
        m &= df["side"] == side
    sub = df[m]
    return None if sub.empty else sub


# ---------------------------------------------------------------------------------------
# figures
# ---------------------------------------------------------------------------------------

def _ecdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.sort(values)
    n = len(x)
    y = np.arange(1, n + 1) / n
    if n > MAX_ECDF_POINTS:  # same curve, fewer vertices
        idx = np.unique(np.linspace(0, n - 1, MAX_ECDF_POINTS).round().astype(int))
        x, y = x[idx], y[idx]
    return x, y


def _plot_latency_cdfs(workload: str, tables: dict[str, pd.DataFrame | None]):
    series: list[tuple[str, str, dict[str, np.ndarray]]] = []
    for title, source, col in LATENCIES:
        df = tables.get(source)
        per_side = {}
        for side in SIDES:
            sub = workload_rows(df, workload, side)
            if sub is None or col not in sub.columns:
                continue
            v = _num(sub, col).to_numpy(dtype=float)
            v = v[np.isfinite(v)]
            if len(v):
                per_side[side] = v
        if per_side:
            series.append((title, col, per_side))
    if not series:
        return None
    fig, axes = plt.subplots(1, len(series), figsize=(2.6 * len(series) + 1, 2.8), squeeze=False)
    for ax, (title, col, per_side) in zip(axes[0], series):
        lo = min(float(v.min()) for v in per_side.values())
        hi = max(float(v.max()) for v in per_side.values())
        for side, v in per_side.items():
            x, y = _ecdf(v)
            ax.step(x, y, where="post", color=SIDE_COLORS[side], lw=1.4,
                    label=f"{side} (n={len(v)})")
        if lo > 0 and hi / lo > 100:
            ax.set_xscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(col, fontsize=8)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7, loc="lower right")
    axes[0][0].set_ylabel("fraction ≤ x", fontsize=8)
    fig.tight_layout()
    return fig


def _implied_candidate_ci(base: float | None, cand: float | None, delta: float | None,
                          ci: Any, kind: DeltaKind = DeltaKind.UNKNOWN
                          ) -> tuple[float, float] | None:
    """Candidate interval implied by the CI of delta: by the check's own `delta_kind`, or
    for a run written before it (UNKNOWN), where delta's form (candidate - baseline,
    relative change, or ratio) can be recognised from the three point values."""
    if base is None or cand is None or delta is None or kind == DeltaKind.NONE:
        return None
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return None
    lo, hi = (as_float(c) for c in ci)
    if lo is None or hi is None:
        return None
    close = lambda a, b: math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-9)  # noqa: E731
    unknown = kind == DeltaKind.UNKNOWN
    if kind == DeltaKind.DIFFERENCE or unknown and close(base + delta, cand):
        return base + lo, base + hi
    if base != 0 and (kind == DeltaKind.RELATIVE or unknown and close(base * (1 + delta), cand)):
        return base * (1 + lo), base * (1 + hi)
    if base != 0 and (kind == DeltaKind.RATIO or unknown and close(base * delta, cand)):
        return base * lo, base * hi
    return None


def _plot_p99(workload: str, checks: list[Check]):
    rows = [c for c in checks
            if c.workload == workload and c.metric.startswith("p99_")
            and (as_float(c.baseline) is not None or as_float(c.candidate) is not None)]
    if not rows:
        return None
    ncols = min(4, len(rows))
    nrows = math.ceil(len(rows) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.5 * ncols + 0.8, 2.7 * nrows), squeeze=False)
    for ax in axes.flat[len(rows):]:
        ax.axis("off")
    for ax, c in zip(axes.flat, rows):
        base, cand = as_float(c.baseline), as_float(c.candidate)
        delta = as_float(c.delta)
        regressed = c.verdict == Verdict.REGRESSION
        colors = [SIDE_COLORS["baseline"], REGRESSION_COLOR if regressed else SIDE_COLORS["candidate"]]
        vals = [base if base is not None else 0.0, cand if cand is not None else 0.0]
        ax.bar([0, 1], vals, color=colors, width=0.6)
        for x, v in ((0, base), (1, cand)):
            if v is None:
                ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=8)
        band = _implied_candidate_ci(base, cand, delta, c.ci, c.delta_kind)
        if band is not None:
            lo, hi = min(band), max(band)
            ax.plot([1, 1], [lo, hi], color="black", lw=1.5)
            ax.plot([1, 1], [lo, hi], color="black", marker="_", ms=14, lw=0)
        ax.set_xticks([0, 1], ["baseline", "candidate"], fontsize=8)
        unit = c.unit
        ax.set_ylabel(unit, fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(axis="y", alpha=0.3)
        sub = f"Δ {fmt_num(delta, signed=True)} CI {fmt_ci(c.ci)}"
        ax.set_title(f"{c.metric}\n{sub} · {c.verdict}", fontsize=8,
                     color=REGRESSION_COLOR if regressed else "black")
    fig.tight_layout()
    return fig


def _plot_distance_to_bar(workload: str, checks: list[Check]):
    """Each latency check's relative change with its CI, against its own bar (a red tick
    per row: the bars of a P99 and a median differ): how far from a verdict each figure
    was, which a pass or a regression alone does not say."""
    rows = [(c, rel) for c in checks if c.workload == workload
            and check_family(c.metric) == "latency" and (rel := relative_change(c))]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 0.38 * len(rows) + 1.1))
    for i, (c, (est, ci)) in enumerate(rows):
        y, color = len(rows) - 1 - i, STATUS_COLORS[check_status(c)]
        if ci is not None:
            ax.plot([100 * ci[0], 100 * ci[1]], [y, y], color=color, lw=2, alpha=0.7)
        ax.plot([100 * est], [y], "o", color=color)
        bar = relative_bar(c)
        if bar is not None:
            ax.plot([100 * bar] * 2, [y - 0.35, y + 0.35], color=REGRESSION_COLOR, lw=2.5)
    ax.axvline(0, color="#999", lw=0.8)
    ax.set_yticks(range(len(rows)), [c.metric + ("" if relative_bar(c) is not None
                                                 else " (not gated)")
                                     for c, _ in reversed(rows)], fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlabel("candidate vs baseline, % (dot: estimate, line: CI, red tick: the bar)",
                  fontsize=8)
    fig.tight_layout()
    return fig


def _plot_syncs(workload: str, steps: pd.DataFrame | None):
    cols = [f"syncs_{p}" for p in PHASES]
    if steps is None or not any(c in steps.columns for c in cols):
        return None
    means: dict[str, list[float]] = {}
    for side in SIDES:
        sub = workload_rows(steps, workload, side)
        if sub is None:
            continue
        vals = [float(_num(sub, c).mean()) if c in sub.columns else float("nan") for c in cols]
        if any(np.isfinite(vals)):
            means[side] = vals
    if not means:
        return None
    fig, ax = plt.subplots(figsize=(7, 2.8))
    x = np.arange(len(PHASES))
    w = 0.8 / len(means)
    for i, (side, vals) in enumerate(means.items()):
        pos = x - 0.4 + w * (i + 0.5)
        v = np.nan_to_num(np.asarray(vals), nan=0.0)
        ax.bar(pos, v, width=w, color=SIDE_COLORS[side],
               label=f"{side} (total {np.nansum(vals):.3g}/step)")
        for p, val, raw in zip(pos, v, vals):
            ax.text(p, val, "n/a" if not np.isfinite(raw) else f"{val:.3g}",
                    ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, PHASES, fontsize=8)
    ax.set_ylabel("mean syncs / step", fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(axis="y", alpha=0.3)
    ax.margins(y=0.15)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _plot_step_durations(workload: str, steps: pd.DataFrame | None):
    if steps is None or "duration_ms" not in steps.columns:
        return None
    lines = []
    for side in SIDES:
        sub = workload_rows(steps, workload, side)
        if sub is None:
            continue
        groups: Iterable = sub.groupby("instance", sort=True, dropna=False) if "instance" in sub.columns \
            else [(None, sub)]
        multi = "instance" in sub.columns and sub["instance"].nunique(dropna=False) > 1
        for inst, g in groups:
            y = _num(g, "duration_ms").to_numpy(dtype=float)
            if "step" in g.columns:
                xs = _num(g, "step").to_numpy(dtype=float)
                if not np.isfinite(xs).all():
                    xs = np.arange(len(g), dtype=float)
            else:
                xs = np.arange(len(g), dtype=float)
            ok = np.isfinite(y)
            if not ok.any():
                continue
            order = np.argsort(xs[ok], kind="stable")
            label = side if not multi else f"{side} / {inst}"
            lines.append((side, label, xs[ok][order], y[ok][order]))
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(9, 2.8))
    styles = ["-", "--", ":", "-."]
    seen: dict[str, int] = {}
    binned = False
    for side, label, xs, y in lines:
        k = seen.get(side, 0)
        seen[side] = k + 1
        text = f"{label} (median {np.median(y):.3g} ms)"
        if len(y) > MAX_STEP_POINTS:  # long run: per-bin median, min-max band
            binned = True
            chunks = np.array_split(np.arange(len(y)), STEP_BINS)
            bx = np.array([xs[c].mean() for c in chunks])
            ax.fill_between(bx, [y[c].min() for c in chunks], [y[c].max() for c in chunks],
                            color=SIDE_COLORS[side], alpha=0.18, lw=0)
            ax.plot(bx, [np.median(y[c]) for c in chunks], styles[k % len(styles)],
                    color=SIDE_COLORS[side], lw=1.0, label=text)
        else:
            ax.plot(xs, y, styles[k % len(styles)], color=SIDE_COLORS[side], lw=0.8, alpha=0.85,
                    label=text)
    if binned:
        ax.set_title(f"binned into {STEP_BINS} groups of steps: line = median, band = min-max",
                     fontsize=8)
    ax.set_xlabel("step", fontsize=8)
    ax.set_ylabel("duration_ms", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return fig


def _rate(df: pd.DataFrame | None, col: str) -> tuple[int, int] | None:
    if df is None or col not in df.columns:
        return None
    b = _to_bool(df[col])
    n = int(b.notna().sum())
    if n == 0:
        return None
    return int(b.sum(skipna=True)), n


def _plot_accuracy(workload: str, requests: pd.DataFrame | None):
    panels = []
    for col, title in (("correct_strict", "accuracy (strict match)"),
                       ("agrees", "token agreement with baseline")):
        bars = []
        for side in SIDES:
            r = _rate(workload_rows(requests, workload, side), col)
            if r is not None:
                bars.append((side, *r))
        if bars:
            panels.append((title, bars))
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels) + 0.6, 2.8), squeeze=False)
    for ax, (title, bars) in zip(axes[0], panels):
        for i, (side, k, n) in enumerate(bars):
            p = k / n
            ci = proportion_ci_wilson(k, n)   # the one Wilson interval (harness/checks/stats.py)
            lo, hi = ci.lo, ci.hi
            ax.bar(i, p, color=SIDE_COLORS[side], width=0.6)
            ax.plot([i, i], [lo, hi], color="black", lw=1.5)
            ax.plot([i, i], [lo, hi], color="black", marker="_", ms=14, lw=0)
            ax.text(i + 0.33, p, f"{p:.3f}\n{k}/{n}", fontsize=7, va="center")
        ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
        ax.set_xlim(-0.6, len(bars) - 0.1)
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{title}\n(Wilson 95% CI)", fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


# builder(workload, ctx) -> Figure | None; ctx: the run's summary (a RunSummary) and its
# tables (requests, itl, steps, profile; None where absent)
PLOTS = (  # (key, title, caption, builder)
    ("distance_to_bar", "Latency: distance to the bar",
     "Each latency check's change (candidate vs baseline) with its CI, coloured by verdict, "
     "against the check's own bar (red tick); a check without a relative change is left out.",
     lambda w, c: _plot_distance_to_bar(w, c["summary"].checks)),
    ("latency_cdf", "Latency CDFs (TTFT, TPOT, ITL, E2EL)",
     "Empirical CDFs per request (ITL: per inter-token gap); log x-axis when the range "
     "spans more than 100x.",
     lambda w, c: _plot_latency_cdfs(w, c)),
    ("p99", "P99 with 95% CI",
     "Bars: P99 per side as reported by the checks (red: regression). Black interval: the "
     "check's 95% CI of delta mapped onto the candidate (baseline + CI, or baseline x (1 + CI) "
     "for a relative delta, as the check's delta_kind says); absent when delta's form is not "
     "known. Titles give delta and its CI as reported.",
     lambda w, c: _plot_p99(w, c["summary"].checks)),
    ("syncs", "Host syncs per step, by phase",
     "Mean host-device synchronisations per step in each phase.",
     lambda w, c: _plot_syncs(w, c["profile"] if c.get("profile") is not None else c["steps"])),
    ("step_duration", "Per-step duration",
     "duration_ms against step index, one line per side (and per instance when several).",
     lambda w, c: _plot_step_durations(w, c["steps"])),
    ("accuracy", "Accuracy and token agreement",
     "Strict-match accuracy and greedy token agreement with the baseline, per side, over "
     "requests that have a value; error bars are Wilson 95% intervals.",
     lambda w, c: _plot_accuracy(w, c["requests"])),
)


# ---------------------------------------------------------------------------------------
# assembling
# ---------------------------------------------------------------------------------------

