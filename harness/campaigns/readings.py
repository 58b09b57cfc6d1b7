"""What the A/A runs of a latency check say beyond their count of false alarms: the
projected power of a uniform slowdown (`projection`), whether the runs spread wider than
their own CIs say (`heterogeneity`), a bound on the false-alarm rate (`exceedance`), and the
bar each is read against (`latency_bar`). Calibration records them per check, and a power
study beside what the ruler measured."""
from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

from ..checks import stats_across_runs
from ..record.study_record import Exceedance, Heterogeneity, Projection
from ..record.suite import Suite, Thresholds


POWER_TARGET = 0.80       # the detection rate a minimum detectable effect must reach
PROJECTED_SHIFTS = (0.02, 0.05, 0.076, 0.10, 0.15, 0.20, 0.30, 0.50)


def entry_thresholds(suite: Suite, workload: str) -> Thresholds:
    """The thresholds of the suite entry that `workload` belongs to (a sweep's workload is
    `ENTRY.POINT`)."""
    ids = [w.id for w in suite.workloads]
    entry = max((i for i in ids if workload == i or workload.startswith(f"{i}.")),
                key=len, default=None)
    return suite.thresholds_for(entry) if entry else suite.thresholds


def latency_bar(suite: Suite, workload: str, metric: str) -> float | None:
    """The relative bar a latency check of `workload` is judged against: its entry's
    `median_rel` for a median, `latency_rel` for a P99."""
    th = entry_thresholds(suite, workload)
    return th.median_rel if metric.startswith("median_") else th.latency_rel


def heterogeneity(row: dict) -> Heterogeneity | None:
    """Whether the A/A runs of a latency check spread wider than their own CIs say (an
    effect of each run's engine instances, which no number of waves averages away):
    stats_across_runs.heterogeneity_cochran_q on the log ratios, each run's standard error
    read off its CI (level 1 - 2 alpha, normal approximation)."""
    pairs = row.get("pairs", [])
    if len(pairs) >= 3:          # runs over engine pairs: each pair is a unit of its own
        e, se = (np.array(x, dtype=float) for x in zip(*pairs))
        h = stats_across_runs.heterogeneity_cochran_q(e, se)
        units, how = "engine pairs", ("on each engine pair's log ratio (its waves' "
                                      "Hodges-Lehmann estimate, the standard error from "
                                      "that CI)")
    elif len(row.get("ci", ())) >= 3:
        z = float(norm.ppf(1 - row["alpha"]))
        d, lo, hi = (np.array(x, dtype=float) for x in zip(*row["ci"]))
        h = stats_across_runs.heterogeneity_cochran_q(np.log1p(d),
                                                      (np.log1p(hi) - np.log1p(lo)) / (2 * z))
        units, how = "runs", (f"on the runs' per-wave log ratios; each run's standard error "
                              f"from its {1 - 2 * row['alpha']:.0%} CI, normal approximation")
    else:
        return None
    if math.isnan(h.q):
        return None
    return Heterogeneity(
        runs=h.runs, q=h.q, df=h.df, p_value=h.p_value, i2=h.i2,
        tau_pct=math.expm1(h.tau) * 100, se_ratio=h.se_ratio, units=units,
        method=f"{h.method} {how}")


def exceedance(row: dict) -> Exceedance | None:
    """A latency check's false-alarm rate bounded by its A/A estimates rather than counted:
    how often an estimate clears the bar (stats_across_runs.exceedance_bound_normal_nct on the log
    ratios). A gate alarms only when its estimate clears the bar, so this bounds the rate
    from above; counting needs ~59 clean runs to show a rate under 5 %."""
    if not row["shift"] or row.get("bar") is None:
        return None
    d = np.log1p(np.array([x for x, _ in row["shift"]], dtype=float))
    e = stats_across_runs.exceedance_bound_normal_nct(d, math.log1p(row["bar"]), level=0.95)
    if math.isnan(e.upper):
        return None
    return Exceedance(
        bar=row["bar"], runs=e.runs, estimate=e.estimate, upper=e.upper, level=e.level,
        normality_p=e.normality_p,
        method=f"{e.method}; on the A/A runs' log ratios against log(1 + bar); an upper "
               f"bound on the false-alarm rate (an alarm needs the estimate over the bar), "
               f"under the normal model")


def projection(row: dict) -> Projection | None:
    """A latency check's projected power from its A/A runs
    (stats_across_runs.shifted_detection_aa)."""
    if not row["shift"] or row.get("bar") is None:
        return None
    d, lo = zip(*row["shift"])
    rates, mde = stats_across_runs.projected_mde_aa(d, lo, row["bar"], PROJECTED_SHIFTS,
                                                    POWER_TARGET)
    return Projection(
        bar=row["bar"], runs=len(d), rates={f"{s * 100:g}": r for s, r in rates.items()},
        mde_pct=None if mde is None else mde * 100,
        method="shift model: each A/A run's per-wave HL estimate and signed-rank CI moved by "
               "a uniform slowdown; detected when the CI's lower bound clears 0 and the "
               "estimate the bar; assumes a uniform slowdown (`mrbench power` measures a "
               "real one)")
