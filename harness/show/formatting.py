"""Numbers as people read them: the one formatter for tables, reports and the CLI.

Why one module: the CLI, the HTML reports and the campaign tables used to format numbers
three ways, so one figure read differently depending on where it was printed.
"""
from __future__ import annotations

import math
from typing import Any

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


def fmt_projected_mde(proj: dict | None) -> str:
    """A calibration check's projected MDE ('15 % (of 55 runs)', '> 50 %'), '-' for a check
    without a projection (not a latency check judged with a CI)."""
    if not proj:
        return "-"
    if proj["mde_pct"] is None:
        return f"> {max(map(float, proj['rates'])):g} %"
    return f"{proj['mde_pct']:g} % (of {proj['runs']} runs)"


def fmt_heterogeneity(checks: dict) -> list[str]:
    """Per latency check with a heterogeneity reading (campaign._heterogeneity), one line:
    whether its A/A runs spread wider than their own CIs, and by how much between runs."""
    out = []
    for name, c in checks.items():
        h = c.get("heterogeneity")
        if not h:
            continue
        head = (f"{name}: A/A estimates spread {h['se_ratio']:.2f}x their runs' own standard "
                f"errors (Cochran's Q p = {h['p_value']:.2g}, {h['runs']} runs)")
        if h["p_value"] < 0.05:
            out.append(f"{head}: between runs +-{h['tau_pct']:.1f} % that no run's CI "
                       f"covers; the bar, not the CI, holds false alarms down")
        else:
            out.append(f"{head}: no spread beyond the CIs shown")
    return out


def fmt_exceedance(checks: dict) -> list[str]:
    """Per latency check with an exceedance reading (campaign._exceedance), one line: how
    often an A/A estimate clears the bar under a normal model of the runs' estimates, the
    plug-in and its upper bound, and whether the model fits (Shapiro-Wilk)."""
    out = []
    for name, c in checks.items():
        e = c.get("exceedance")
        if not e:
            continue
        fit = ("" if e["normality_p"] >= 0.05 else
               "; the estimates are not normal, so the bound is not to be trusted")
        out.append(f"{name}: an A/A estimate over the +{e['bar']:.0%} bar: {e['estimate']:.2%}"
                   f" (normal model of {e['runs']} runs), at most {e['upper']:.1%} at "
                   f"{e['level']:.0%} (non-central t; Shapiro-Wilk p = "
                   f"{e['normality_p']:.2g}){fit}")
    return out


def fmt_realized(res: dict) -> list[str]:
    """A power study's `realized_pct` as lines: what each ruler size added by its own
    account, where the runs recorded it, and moved the medians and P99s by
    ('slow-step:5 added +5.0 %, moved median_step +5.7 %, median_tpot +5.4 %, ...')."""
    added = res.get("ruler_added_pct") or {}
    return [f"slow-step:{p} "
            + (f"added {added[p]:+.1f} % (its own account), " if p in added else "")
            + "moved " + ", ".join(f"{m.removesuffix('_ms')} {v:+.1f} %"
                                   for m, v in moved.items())
            for p, moved in res.get("realized_pct", {}).items()]
