"""Numbers as people read them: the one formatter for tables, reports and the CLI.

Why one module: the CLI, the HTML reports and the campaign tables used to format numbers
three ways, so one figure read differently depending on where it was printed.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..checks.history_gate import SUFFIX as VS_HISTORY
from ..record.metrics import LATENCY
from ..record.run_record import BarKind, Check, DeltaKind, Verdict
from ..record.study_record import CalibrationCheck, PowerCheck, PowerStudy, Projection

MISSING = "—"


def is_missing(x: Any) -> bool:
    """None or a float NaN (what pandas gives for an empty cell)."""
    if x is None:
        return True
    try:
        return bool(isinstance(x, float) and math.isnan(x))
    except TypeError:
        return False


def as_float(x: Any) -> float | None:
    """A number as float, or None for missing, bools and what does not parse."""
    if is_missing(x) or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def fmt_num(x: Any, signed: bool = False, sig: int = 4) -> str:
    """Number for a table cell: ``sig`` significant digits, big numbers in full, None -> '—'."""
    if is_missing(x):
        return MISSING
    if isinstance(x, bool):
        return str(x).lower()
    v = as_float(x)
    if v is None:
        return str(x)
    if math.isinf(v):
        return ("+" if signed and v > 0 else "") + ("∞" if v > 0 else "-∞")
    sign = "+" if signed and v > 0 else ""
    if v == 0:
        return "0"
    a = abs(v)
    if 10 ** sig <= a < 1e15:
        return f"{sign}{v:,.0f}"
    return f"{sign}{v:.{sig}g}"


def fmt_p(p: Any) -> str:
    """A p-value: three significant digits, tiny ones as '<1e-4'."""
    v = as_float(p)
    if v is None:
        return MISSING
    if 0 < v < 1e-4:
        return "<1e-4"
    return f"{v:.3g}"


def fmt_ci(ci: Any) -> str:
    """A confidence interval [lo, hi] of signed numbers."""
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return MISSING
    lo, hi = (as_float(c) for c in ci)
    if lo is None and hi is None:
        return MISSING
    return f"[{fmt_num(lo, signed=True)}, {fmt_num(hi, signed=True)}]"


def fmt_rate(count: int, runs: int, rate: float, ci: tuple[float, float]) -> str:
    """'k/n (rate%, CI lo%-hi%)' for a false-alarm or detection rate."""
    lo, hi = ci
    return f"{count}/{runs} ({rate:.0%}, CI {lo:.0%}-{hi:.0%})"


def fmt_projected_mde(proj: Projection | None) -> str:
    """A calibration check's projected MDE ('15 % (of 55 runs)', '> 50 %'), '-' for a check
    without a projection (not a latency check judged with a CI)."""
    if proj is None:
        return "-"
    if proj.mde_pct is None:
        return f"> {max(map(float, proj.rates)):g} %" if proj.rates else "-"
    return f"{proj.mde_pct:g} % (of {proj.runs} runs)"


def fmt_heterogeneity(checks: Mapping[str, CalibrationCheck | PowerCheck]) -> list[str]:
    """Per latency check with a heterogeneity reading (campaign._heterogeneity), one line:
    whether its A/A runs spread wider than their own CIs, and by how much between runs."""
    out = []
    for name, c in checks.items():
        h = c.heterogeneity
        if h is None:
            continue
        unit = "engine pair" if h.units == "engine pairs" else "run"
        head = (f"{name}: A/A estimates spread {h.se_ratio:.2f}x their {unit}s' own "
                f"standard errors (Cochran's Q p = {h.p_value:.2g}, {h.runs} {h.units})")
        if h.p_value < 0.05 and unit == "run":
            out.append(f"{head}: between runs +-{h.tau_pct:.1f} % that no run's CI "
                       f"covers; the bar, not the CI, holds false alarms down")
        elif h.p_value < 0.05:
            out.append(f"{head}: between engine pairs +-{h.tau_pct:.1f} %, what the "
                       f"suite's pair_sd_rel is set from")
        else:
            out.append(f"{head}: no spread beyond the CIs shown")
    return out


def fmt_exceedance(checks: Mapping[str, CalibrationCheck | PowerCheck]) -> list[str]:
    """Per latency check with an exceedance reading (campaign._exceedance), one line: how
    often an A/A estimate clears the bar under a normal model of the runs' estimates, the
    plug-in and its upper bound, and whether the model fits (Shapiro-Wilk)."""
    out = []
    for name, c in checks.items():
        e = c.exceedance
        if e is None:
            continue
        fit = ("" if e.normality_p >= 0.05 else
               "; the estimates are not normal, so the bound is not to be trusted")
        out.append(f"{name}: an A/A estimate over the +{e.bar:.0%} bar: {e.estimate:.2%}"
                   f" (normal model of {e.runs} runs), at most {e.upper:.1%} at "
                   f"{e.level:.0%} (non-central t; Shapiro-Wilk p = "
                   f"{e.normality_p:.2g}){fit}")
    return out


def fmt_realized(res: PowerStudy) -> list[str]:
    """A power study's `realized_pct` as lines: what each ruler size added by its own
    account, where the runs recorded it, and moved the medians and P99s by
    ('slow-step:5 added +5.0 %, moved median_step +5.7 %, median_tpot +5.4 %, ...')."""
    added = res.ruler_added_pct
    return [f"slow-step:{p} "
            + (f"added {added[p]:+.1f} % (its own account), " if p in added else "")
            + "moved " + ", ".join(f"{m.removesuffix('_ms')} {v:+.1f} %"
                                   for m, v in moved.items())
            for p, moved in res.realized_pct.items()]


# ---- checks as a reader sorts them: family, status, the figure against its bar ------------

FAMILIES = ("correctness", "latency", "counts", "state", "coverage")
OTHER = "other"             # a metric no family names (a newer check, an import's figure)
# Each metric the check modules of harness/checks/ make, by the module that makes it.
# spec.py's mean_acceptance_length is correctness: the bug it catches is a sampler that
# rejects drafts it should accept (docs/checks.md, `strict-acceptance`), which changes no
# token, so it is the one correctness check the tokens cannot make.
_FAMILY_OF = {
    **dict.fromkeys(("accuracy_strict", "token_agreement", "sampled_distribution",
                     "cross_engine_parity", "mean_acceptance_length", "logprobs_agreement"),
                    "correctness"),
    **dict.fromkeys(("syncs_per_step", "sync_check_warnings", "ops_per_step",
                     "allocs_per_step", "ops_vs_baseline", "ops_vs_reference",
                     "launches_per_step", "launches_vs_baseline"), "counts"),
    "state_audit_violations": "state",
    "kv_transfers_missing": "correctness",      # a request decoded on KV that never came
    **dict.fromkeys(("unwarmed_dispatch", "chunked_prefill_coverage", "preemption_coverage",
                     "prefix_cache_coverage", "cudagraph_mode"), "coverage"),
}


def check_family(metric: str) -> str:
    """The check family (FAMILIES) a metric belongs to, as harness/checks/ groups them: one
    place, so the report's matrix and any other reader sort a check alike. Latency is every
    gateable latency figure (record/metrics.py), its `_vs_history` check, and any other
    `_ms` figure (an imported run's); what no family names is OTHER."""
    if metric in _FAMILY_OF:
        return _FAMILY_OF[metric]
    base = metric.removesuffix(VS_HISTORY)
    return "latency" if base in LATENCY or base.endswith("_ms") else OTHER


NOT_MEASURED = "not measured"
# worst first. A regression outranks an error within one cell: the cell then shows the
# finding, and its count line still says there was an error (the run's verdict, which
# ranks an error first, is the badge's)
STATUSES = (str(Verdict.REGRESSION), str(Verdict.ERROR), NOT_MEASURED, str(Verdict.PASS),
            str(Verdict.INFO))


def check_status(c: Check) -> str:
    """The check's verdict, except a reported check that says it measured nothing ("not
    measured: ..."), which a reader must see beside the errors rather than among the
    figures merely reported."""
    if c.verdict == Verdict.INFO and c.note.startswith(NOT_MEASURED):
        return NOT_MEASURED
    return str(c.verdict)


def relative_change(c: Check) -> tuple[float, tuple[float, float] | None] | None:
    """The check's change as candidate / baseline - 1, with its CI in the same form, where
    its delta is one: by `delta_kind`, or for a check written before it (UNKNOWN) where
    the three numbers show it. None for a difference or a missing delta."""
    d = as_float(c.delta)
    if d is None:
        return None
    kind = c.delta_kind
    if kind == DeltaKind.UNKNOWN:
        b, k = as_float(c.baseline), as_float(c.candidate)
        if not b or k is None:
            return None
        close = lambda x: math.isclose(x, k, rel_tol=1e-3, abs_tol=1e-9)  # noqa: E731
        kind = (DeltaKind.RELATIVE if close(b * (1 + d)) else
                DeltaKind.RATIO if close(b * d) else DeltaKind.UNKNOWN)
    shift = {DeltaKind.RELATIVE: 0.0, DeltaKind.RATIO: -1.0}.get(kind)
    if shift is None:
        return None
    lo, hi = (as_float(x) for x in (c.ci if isinstance(c.ci, list) and len(c.ci) == 2
                                    else (None, None)))
    return d + shift, None if lo is None or hi is None else (lo + shift, hi + shift)


def relative_bar(c: Check) -> float | None:
    """The bound of a relative bar as a signed change (+0.05: at most 5 % more), else None."""
    if c.bar is None or c.bar.value is None:
        return None
    return {BarKind.MAX_RELATIVE_INCREASE: c.bar.value,
            BarKind.MAX_RELATIVE_DECREASE: -c.bar.value}.get(c.bar.kind)


def fmt_pct(x: float | None) -> str:
    """A relative change as a signed percentage, two significant digits ('+6.1 %')."""
    return MISSING if x is None else f"{fmt_num(100 * x, signed=True, sig=2)} %"


def fmt_delta(c: Check) -> str:
    """The check's change: a percentage where it is relative, else as the check gave it."""
    rel = relative_change(c)
    return fmt_pct(rel[0]) if rel else fmt_num(c.delta, signed=True)


def fmt_delta_ci(c: Check) -> str:
    """The change's CI, in the form `fmt_delta` gives the change."""
    rel = relative_change(c)
    if rel is None:
        return fmt_ci(c.ci)
    return MISSING if rel[1] is None else f"[{fmt_pct(rel[1][0])}, {fmt_pct(rel[1][1])}]"


def figure_and_bar(c: Check) -> tuple[str, str | None]:
    """(the figure that decides the check, its bar) from the structured bar, never the prose
    threshold: ('+6.1 %', '+5 %'), ('-0.03', '-0.02'), ('0', '≤ 0'), ('p 0.003', 'p < 0.05');
    the bar is None for a check not gated (or recorded before bars were), whose figure is
    its change."""
    kind = c.bar.kind if c.bar is not None else BarKind.NONE
    v = fmt_num(c.bar.value) if c.bar is not None else MISSING
    if kind in (BarKind.MAX_RELATIVE_INCREASE, BarKind.MAX_RELATIVE_DECREASE):
        rel = relative_change(c)
        return fmt_pct(rel[0] if rel else None), fmt_pct(relative_bar(c))
    if kind in (BarKind.MAX_INCREASE, BarKind.MAX_DECREASE):
        return fmt_num(c.delta, signed=True), ("+" if kind == BarKind.MAX_INCREASE else "-") + v
    if kind in (BarKind.MAX_VALUE, BarKind.MIN_VALUE):
        return fmt_num(c.candidate), ("≤ " if kind == BarKind.MAX_VALUE else "≥ ") + v
    if kind == BarKind.SIGNIFICANCE:
        alpha = MISSING if c.bar.alpha is None else f"{c.bar.alpha:g}"
        return f"p {fmt_p(c.p_value)}", f"p < {alpha}"
    return (fmt_delta(c) if c.delta is not None else fmt_num(c.candidate)), None


def fmt_vs_bar(c: Check) -> str:
    """The figure against its bar, as a matrix cell gives it: '+6.1 % / bar +5 %', '0 / bar
    ≤ 0'; '+6.1 %, not gated' (or 'bar not recorded', for a run from before bars)."""
    figure, bar = figure_and_bar(c)
    if bar is not None:
        return f"{figure} / bar {bar}"
    return f"{figure}, {'not gated' if c.bar is not None else 'bar not recorded'}"


def fmt_duration(seconds: Any) -> str:
    """A run's wall time for people: '48 s', '2 min 5 s', '1 h 3 min'."""
    s = as_float(seconds)
    if s is None:
        return MISSING
    s = round(s)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"
