"""Statistics across runs: what a set of independent runs of one comparison says, where
`stats.py` holds what one run's samples say.

Why apart: these judge a campaign or a history, not a run. The A/A projections
(`shifted_detection_aa`, `projected_mde_aa`) and the exceedance bound size a gate's bar from
A/A runs (`mrbench power`, `calibrate`); Cochran's Q says whether runs spread beyond their
own CIs; `prediction_shift_t` judges a new run's ratio against its history (the history
gate). The conventions are stats.py's: the method in each function's name and result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st
from scipy.optimize import brentq as _brentq

from .stats import _NAN, ArrayLike, TestResult, _as_1d_float, _check_level

__all__ = ["Heterogeneity", "Exceedance", "shifted_detection_aa", "projected_mde_aa",
           "exceedance_bound_normal_nct", "heterogeneity_cochran_q", "prediction_shift_t",
           "PooledEstimate", "random_effects_mean_hksj"]


@dataclass(frozen=True)
class Heterogeneity:
    """How far independent runs' estimates of one quantity spread beyond each run's own
    standard error (``method``): Cochran's Q on ``df`` degrees of freedom and its p-value,
    I^2 (the share of the spread that is between runs), ``tau`` (the between-run standard
    deviation, on the estimates' scale) and ``se_ratio`` (Higgins' H, sqrt(Q / df): how many
    times their own standard errors the estimates spread; about 1 when each run's CI is
    honest)."""

    runs: int
    q: float
    df: int
    p_value: float
    i2: float
    tau: float
    se_ratio: float
    method: str


@dataclass(frozen=True)
class Exceedance:
    """How often a quantity exceeds ``threshold``, from ``runs`` independent draws of it under
    a normal model (``method``): the plug-in ``estimate`` and an ``upper`` confidence bound
    at ``level``; ``normality_p``, the Shapiro-Wilk p-value of the draws (a small one says
    the model does not hold and the bound is not to be trusted)."""

    runs: int
    threshold: float
    estimate: float
    upper: float
    level: float
    normality_p: float
    method: str


def shifted_detection_aa(deltas: ArrayLike, ci_los: ArrayLike, shift: float,
                         bar: float) -> float:
    """Projected detection rate of a uniform relative slowdown `shift`, from A/A runs.

    Method: shift model on the per-wave Hodges-Lehmann estimate and its signed-rank CI. A
    slowdown that multiplies every wave's statistic by (1 + shift) adds log1p(shift) to
    every wave's log ratio, and both the HL estimate and its CI are shift-equivariant. So
    each A/A run tells, without running again, whether it would have flagged that
    slowdown: its CI's lower bound would clear 0 (the one-sided signed-rank test's
    decision at alpha, for a CI of level 1 - 2 alpha) and its estimate the bar. The rate
    over the runs is the projection; at shift 0 it is the observed false-alarm rate.

    It assumes the slowdown is uniform across waves. A real one (or the slow-step ruler)
    that moves some steps more than others is measured by `mrbench power`, not projected.
    `deltas` and `ci_los` are relative (candidate / baseline - 1), one per A/A run."""
    d = _as_1d_float(deltas, "deltas", dropna=False)
    lo = _as_1d_float(ci_los, "ci_los", dropna=False)
    if d.size != lo.size:
        raise ValueError(f"deltas and ci_los differ in length ({d.size} vs {lo.size})")
    ok = ~(np.isnan(d) | np.isnan(lo))
    if not ok.any():
        return _NAN
    s = math.log1p(shift)
    hit = (np.log1p(lo[ok]) + s > 0) & (np.log1p(d[ok]) + s > math.log1p(bar))
    return float(hit.mean())


def projected_mde_aa(deltas: ArrayLike, ci_los: ArrayLike, bar: float,
                     shifts: ArrayLike, target: float = 0.8) -> tuple[dict[float, float],
                                                                      float | None]:
    """Per shift, :func:`shifted_detection_aa`; and the smallest shift whose projected rate
    reaches `target` (None when none does)."""
    rates = {float(s): shifted_detection_aa(deltas, ci_los, float(s), bar)
             for s in sorted(np.asarray(shifts, dtype=float))}
    mde = next((s for s, r in rates.items() if s > 0 and r >= target), None)
    return rates, mde


def exceedance_bound_normal_nct(draws: ArrayLike, threshold: float,
                                level: float = 0.95) -> Exceedance:
    """P(X > threshold) for a normal X seen only through independent draws: the plug-in
    Phi((mean - threshold) / sd) and a one-sided upper confidence bound from the
    non-central t (the exceedance form of a one-sided normal tolerance bound).

    Why: a false-alarm rate under 5 % cannot be shown by counting until some 59 A/A runs
    have passed without an alarm, which on a GPU is hours. Every A/A run also gives its
    estimate, and a gate can only alarm when the estimate clears the bar, so P(estimate >
    bar) bounds the rate from above (the significance test only lowers it). Under a normal
    model of the estimates, sqrt(n) (threshold - mean) / sd follows a non-central t on
    n - 1 df with non-centrality sqrt(n) z, where z = (threshold - mu) / sigma; the lower
    confidence limit of that non-centrality gives the upper bound Phi(-z_lo). The model is
    the assumption: `normality_p` (Shapiro-Wilk) is reported beside it, and the count of
    alarms stays the model-free figure. Fewer than 3 finite draws, or draws without spread:
    NaN."""
    x = _as_1d_float(draws, "draws")
    lf = _check_level(level)
    method = (f"normal model of {x.size} draws; upper bound: lower {lf:.0%} confidence limit "
              f"of the non-central t's non-centrality; normality: Shapiro-Wilk")
    thr = float(threshold)
    if x.size < 3 or not np.ptp(x) > 0:
        return Exceedance(int(x.size), thr, _NAN, _NAN, lf, _NAN, method)
    n, mean, sd = x.size, float(np.mean(x)), float(np.std(x, ddof=1))
    t_obs = math.sqrt(n) * (thr - mean) / sd
    df = n - 1

    def excess(nc: float) -> float:          # increasing in nc
        return float(_st.nct.sf(t_obs, df, nc)) - (1 - lf)

    lo, hi = t_obs - 10.0, t_obs + 10.0
    while excess(lo) > 0:
        lo -= 10.0
    while excess(hi) < 0:
        hi += 10.0
    nc_lo = float(_brentq(excess, lo, hi, xtol=1e-10))
    return Exceedance(n, thr, float(_st.norm.cdf((mean - thr) / sd)),
                      float(_st.norm.cdf(-nc_lo / math.sqrt(n))), lf,
                      float(_st.shapiro(x).pvalue), method)


def heterogeneity_cochran_q(estimates: ArrayLike, std_errors: ArrayLike) -> Heterogeneity:
    """Cochran's Q test that independent runs estimate one common value, each with its own
    standard error; I^2 and the DerSimonian-Laird between-run standard deviation ``tau``.

    Why: a run's CI covers the noise inside the run (its waves) and nothing else. If each run
    has something of its own that moves its estimate (two engine instances that differ by a
    fixed amount for their whole life), A/A runs spread wider than their CIs say, each run's
    p-value is too small, and only the bar keeps false alarms down; more waves then narrow
    the CI but not that spread. Q compares the spread with the CIs: under a common value,
    Q ~ chi^2(k - 1). Runs with a missing or non-positive standard error are left out;
    fewer than 3 runs give NaN."""
    e = _as_1d_float(estimates, "estimates", dropna=False)
    se = _as_1d_float(std_errors, "std_errors", dropna=False)
    if e.size != se.size:
        raise ValueError(f"estimates and std_errors differ in length ({e.size} vs {se.size})")
    ok = np.isfinite(e) & np.isfinite(se) & (se > 0)
    e, se = e[ok], se[ok]
    method = "Cochran's Q (chi^2, k-1 df), I^2, Higgins' H, DerSimonian-Laird tau"
    k = int(e.size)
    if k < 3:
        return Heterogeneity(k, _NAN, max(k - 1, 0), _NAN, _NAN, _NAN, _NAN, method)
    w = 1.0 / se**2
    mu = float(np.sum(w * e) / np.sum(w))
    q = float(np.sum(w * (e - mu) ** 2))
    df = k - 1
    i2 = max(0.0, (q - df) / q) if q > 0 else 0.0
    tau2 = max(0.0, (q - df) / float(np.sum(w) - np.sum(w**2) / np.sum(w)))
    # H, not sd(estimates) / rms(SE): where the units' errors differ (a noisy run's pairs
    # beside quiet ones) the quiet units' spread is what Q weighs, and the plain ratio,
    # dominated by the noisy units' errors, read 0.59x beside a Q of p 2e-9
    ratio = math.sqrt(q / df)
    return Heterogeneity(k, q, df, float(_st.chi2.sf(q, df)), i2, math.sqrt(tau2), ratio,
                         method)


@dataclass(frozen=True)
class PooledEstimate:
    """A mean over independent units (engine pairs, runs), its two-sided CI at ``level``,
    the one-sided p-value that it is above 0, and the between-unit standard deviation
    ``tau`` it allowed for (``tau_source``: "calibrated" or "these units")."""

    estimate: float
    lo: float
    hi: float
    level: float
    p_greater: float
    tau: float
    tau_source: str
    units: int
    method: str


def random_effects_mean_hksj(estimates: ArrayLike, std_errors: ArrayLike, tau_floor: float,
                             level: float = 0.95) -> PooledEstimate:
    """The random-effects mean of independent units' estimates (weights 1 / (se_i^2 +
    tau^2)), with tau the larger of `tau_floor` (a between-unit standard deviation
    calibrated on A/A runs) and the DerSimonian-Laird estimate from these units; its CI and
    one-sided p (H1: mean > 0) by Hartung-Knapp-Sidik-Jonkman: the variance scaled by the
    units' own weighted dispersion about the mean, never below 1 (the modified form, so
    units that agree by chance do not narrow it), on t with k - 1 df.

    Why a random-effects mean: a unit's own standard error covers its samples only; an
    engine pair has an offset of its own for life, which no number of its waves averages.
    The mean of k pairs carries tau^2 / k of it. From k = 2 or 3 units tau itself is too
    uncertain to trust alone, so a calibrated tau is its floor; a run whose pairs spread
    more than that widens its own CI.

    Why HKSJ and not DerSimonian-Laird's normal CI: the normal CI takes every weight as
    known, and six pairs' standard errors, each read off a dozen waves, are not: it is too
    narrow, most where the waves are noisy (docs/detection-power.md, "Pooling engine
    pairs", judges an A/A run and the ruler both ways).
    One unit: no dispersion to read, so tau is the floor and the CI normal. Units with a
    missing or non-positive standard error are left out; none left: NaN."""
    e = _as_1d_float(estimates, "estimates", dropna=False)
    se = _as_1d_float(std_errors, "std_errors", dropna=False)
    if e.size != se.size:
        raise ValueError(f"estimates and std_errors differ in length ({e.size} vs {se.size})")
    if not (math.isfinite(tau_floor) and tau_floor >= 0):
        raise ValueError(f"tau_floor must be finite and >= 0, got {tau_floor}")
    _check_level(level)
    ok = np.isfinite(e) & np.isfinite(se) & (se > 0)
    e, se = e[ok], se[ok]
    k = int(e.size)
    ci = "normal CI" if k < 2 else f"Hartung-Knapp-Sidik-Jonkman t CI ({k - 1} df, modified)"
    method = (f"random-effects mean over {k} unit(s), between-unit sd the larger of the "
              f"calibrated {tau_floor:.3g} and DerSimonian-Laird's; {ci}, one-sided p")
    if k == 0:
        return PooledEstimate(_NAN, _NAN, _NAN, level, _NAN, _NAN, "", 0, method)
    tau, source = tau_floor, "calibrated"
    if k >= 2:
        w = 1.0 / se**2
        mu = float(np.sum(w * e) / np.sum(w))
        q = float(np.sum(w * (e - mu) ** 2))
        dl = math.sqrt(max(0.0, (q - (k - 1)) / float(np.sum(w) - np.sum(w**2) / np.sum(w))))
        if dl > tau:
            tau, source = dl, "these units"
    w = 1.0 / (se**2 + tau**2)
    mu = float(np.sum(w * e) / np.sum(w))
    var = 1.0 / float(np.sum(w))
    if k < 2:
        dist = _st.norm
    else:
        var *= max(1.0, float(np.sum(w * (e - mu) ** 2)) / (k - 1))
        dist = _st.t(k - 1)
    sd = math.sqrt(var)
    z = float(dist.ppf(0.5 + level / 2))
    return PooledEstimate(mu, mu - z * sd, mu + z * sd, level, float(dist.sf(mu / sd)),
                          tau, source, k, method)


def prediction_shift_t(history: ArrayLike, new: float) -> TestResult:
    """One-sided test that `new` lies above what `history` (independent draws of the same
    quantity) predicts: t = (new - mean) / (sd * sqrt(1 + 1/n)) on n - 1 df, the statistic of
    the normal prediction interval for one further draw; p = P(T > t).

    Why: a V2-against-V1 run's latency ratio carries the runners' own difference, so it is
    judged against the ratios of earlier passing comparable runs, each an A/A draw of it. Their
    spread holds both the noise inside a run and the run-to-run spread of engine instances,
    which a run's own CI leaves out (heterogeneity_cochran_q). Fewer than 3 finite draws, or
    draws without spread: NaN."""
    x = _as_1d_float(history, "history")
    method = (f"prediction t test: the new value against the normal prediction interval of "
              f"{x.size} earlier values ({max(x.size - 1, 0)} df), one-sided")
    if x.size < 3 or not np.ptp(x) > 0 or not math.isfinite(new):
        return TestResult(_NAN, _NAN, method)
    n = x.size
    t = (float(new) - float(np.mean(x))) / (float(np.std(x, ddof=1)) * math.sqrt(1 + 1 / n))
    return TestResult(t, float(_st.t.sf(t, n - 1)), method)
