"""Statistics for the regression harness: quantile CIs, two-sample comparisons, accuracy tests.

Conventions (asv-style):

* every public function names its method in its name and in the ``method`` string it returns,
  so a report can say *how* a number was obtained;
* inputs may be lists, numpy arrays or pandas Series; NaNs are dropped from continuous samples
  (a failed request is not a latency), binary outcomes must be 0/1 and may not be NaN;
* empty input gives NaN results rather than an exception (a run with no samples should still
  render), while a malformed request (bad ``q``/``level``, mismatched paired lengths) raises
  ``ValueError``;
* resampling is deterministic: every bootstrap takes ``seed`` and uses
  ``numpy.random.default_rng(seed)``, so the same data always gives the same verdict.

Percentiles use numpy's default ``'linear'`` interpolation throughout; ``q`` is in [0, 100].
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as _st

__all__ = [
    "Interval",
    "TestResult",
    "percentile",
    "percentile_ci_order_statistic",
    "mann_whitney_u",
    "sign_flip_test_paired",
    "mcnemar_exact",
    "proportion_ci_wilson",
    "paired_diff_proportion_ci",
    "mean_ci_t",
    "mean_diff_welch",
    "summarize_latency",
]

ArrayLike = Iterable[Any]

_NAN = float("nan")


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided confidence interval at ``level``, made by ``method``."""

    estimate: float
    lo: float
    hi: float
    level: float
    method: str


@dataclass(frozen=True)
class TestResult:
    """A hypothesis test's statistic and p-value, made by ``method``."""

    __test__ = False  # not a pytest test class, even when imported into a test module

    statistic: float
    p_value: float
    method: str


# ---- input handling ---------------------------------------------------------------------


def _as_1d_float(samples: ArrayLike, name: str = "samples", dropna: bool = True) -> np.ndarray:
    """1-D float array; NaNs (and pandas NA) dropped so missing values never bias a statistic."""
    if hasattr(samples, "to_numpy"):  # pandas Series / Index / ExtensionArray
        arr = samples.to_numpy(dtype=float, na_value=np.nan)
    else:
        try:
            arr = np.asarray(samples, dtype=float)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{name} must be numeric: {e}") from None
    if arr.ndim == 0:
        raise ValueError(f"{name} must be a 1-D sequence, got a scalar")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if dropna:
        arr = arr[~np.isnan(arr)]
    return arr


def _as_binary(outcomes: ArrayLike, name: str) -> np.ndarray:
    """1-D bool array from 0/1 or bool data; anything else is a caller bug, so it raises."""
    arr = _as_1d_float(outcomes, name, dropna=False)
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN; paired binary outcomes must all be 0/1")
    if not np.isin(arr, (0.0, 1.0)).all():
        raise ValueError(f"{name} must contain only 0/1 or booleans")
    return arr.astype(bool)


def _paired_binary(
    base_correct: ArrayLike, cand_correct: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    b = _as_binary(base_correct, "base_correct")
    c = _as_binary(cand_correct, "cand_correct")
    if b.shape != c.shape:
        raise ValueError(
            f"paired outcomes must have equal lengths: base_correct has {b.size}, "
            f"cand_correct has {c.size}"
        )
    return b, c


def _check_q(q: float) -> float:
    try:
        qf = float(q)
    except (TypeError, ValueError):
        raise ValueError(f"q must be a number in [0, 100], got {q!r}") from None
    if not (0.0 <= qf <= 100.0):  # also rejects NaN
        raise ValueError(f"q must be in [0, 100] (a percentile, not a fraction), got {q!r}")
    return qf


def _check_level(level: float) -> float:
    try:
        lf = float(level)
    except (TypeError, ValueError):
        raise ValueError(f"level must be a number in (0, 1), got {level!r}") from None
    if not (0.0 < lf < 1.0):
        raise ValueError(f"level must be in the open interval (0, 1), e.g. 0.95; got {level!r}")
    return lf


def _check_n_boot(n_boot: int) -> int:
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive integer, got {n_boot!r}")
    return int(n_boot)


# ---- percentiles ------------------------------------------------------------------------


def percentile(samples: ArrayLike, q: float) -> float:
    """The q-th percentile with numpy's default 'linear' interpolation; NaN when empty.

    One definition everywhere, so a p99 in a table and the p99 inside a CI agree.
    """
    qf = _check_q(q)
    x = _as_1d_float(samples)
    if x.size == 0:
        return _NAN
    return float(np.percentile(x, qf))


def percentile_ci_order_statistic(samples: ArrayLike, q: float, level: float = 0.95) -> Interval:
    """Distribution-free CI for the q-th percentile from binomial order statistics.

    Exact (Hahn & Meeker): the count of samples below the true quantile is Binomial(n, q/100),
    so ``[x_(l), x_(u)]`` covers it with probability >= ``level`` for any continuous
    distribution, no resampling and no shape assumption. ``l`` and ``u`` are chosen so each
    tail misses with probability <= (1 - level)/2, then widened if needed to the order
    statistics bracketing the 'linear' estimate, so the interval always contains it. When n
    is too small (a p99 from 50 requests), the missing side is clipped to the sample min/max,
    the coverage guarantee no longer holds, and the method says "order-statistic (clipped)".
    """
    qf = _check_q(q)
    lf = _check_level(level)
    x = np.sort(_as_1d_float(samples))
    n = x.size
    if n == 0:
        return Interval(_NAN, _NAN, _NAN, lf, "order-statistic")
    p = qf / 100.0
    tail = (1.0 - lf) / 2.0
    cdf = _st.binom.cdf(np.arange(n), n, p)  # cdf[k] = P(B <= k), k = 0..n-1
    # Lower: largest 1-based l with P(B <= l-1) <= tail.
    lower_ok = np.flatnonzero(cdf <= tail)
    # Upper: smallest 1-based u with P(B <= u-1) >= 1 - tail.
    upper_ok = np.flatnonzero(cdf >= 1.0 - tail)
    clipped = lower_ok.size == 0 or upper_ok.size == 0
    l_idx = int(lower_ok[-1]) if lower_ok.size else 0  # 0-based index of x_(l)
    u_idx = int(upper_ok[0]) if upper_ok.size else n - 1
    # The 'linear' estimate sits between x[floor(pos)] and x[ceil(pos)]; in tiny samples or at
    # low levels the exact bound can fall strictly inside that gap. Widen to the bracketing
    # order statistic so the interval always contains its estimate (only adds coverage).
    # Compare against the estimate itself, not its index: (n-1)*p in floating point can sit
    # a hair off an integer while np.percentile still interpolates past the order statistic.
    est = float(np.percentile(x, qf))
    if est < x[l_idx]:
        l_idx = int(np.searchsorted(x, est, side="right")) - 1
    if est > x[u_idx]:
        u_idx = int(np.searchsorted(x, est, side="left"))
    method = "order-statistic (clipped)" if clipped else "order-statistic"
    return Interval(est, float(x[l_idx]), float(x[u_idx]), lf, method)


def min_samples_percentile_ci(q: float, level: float = 0.95) -> int:
    """Fewest samples whose order-statistic CI for the q-th percentile has both bounds.

    The upper bound exists once the sample maximum lies above the true quantile with
    probability >= 1 - (1 - level)/2, i.e. 1 - (q/100)^n >= 1 - tail (the lower bound, for
    q >= 50, needs fewer). A p99 at level 0.90 needs n >= 299: below that no method can say
    where the p99 is, it can only quote the sample maximum.
    """
    p = max(_check_q(q), 100.0 - _check_q(q)) / 100.0
    tail = (1.0 - _check_level(level)) / 2.0
    return max(1, math.ceil(math.log(tail) / math.log(p) - 1e-12)) if p < 1 else 2 ** 31


# ---- two-sample tests -------------------------------------------------------------------


def _signed_rank_null_cdf(n: int) -> np.ndarray:
    """cdf[t] = P(W+ <= t) for the Wilcoxon signed-rank statistic of n pairs (no ties),
    by the exact recursion over ranks (2^n sign patterns, counted, not enumerated)."""
    m = n * (n + 1) // 2
    counts = np.zeros(m + 1)
    counts[0] = 1.0
    for r in range(1, n + 1):
        counts[r:] = counts[r:] + counts[:-r].copy()
    return np.cumsum(counts) / 2.0 ** n


def hodges_lehmann_ci_signed_rank(diffs: ArrayLike, level: float = 0.95) -> Interval:
    """Hodges-Lehmann estimate of the median paired difference, with the exact CI that
    inverts the Wilcoxon signed-rank test (the Walsh averages' order statistics).

    For blocked designs: one difference per block (an interleaved wave, both sides timed
    under the same machine conditions), so a burst that hits one block moves one rank, not
    the estimate. Needs n >= 1; with very few blocks the interval is clipped to the extreme
    Walsh averages and the method says "(clipped)".
    """
    lf = _check_level(level)
    d = _as_1d_float(diffs, "diffs")
    n = d.size
    if n == 0:
        return Interval(_NAN, _NAN, _NAN, lf, "Hodges-Lehmann / signed-rank")
    i, j = np.triu_indices(n)
    walsh = np.sort((d[i] + d[j]) / 2.0)
    est = float(np.median(walsh))
    cdf = _signed_rank_null_cdf(n)
    tail = (1.0 - lf) / 2.0
    ok = np.flatnonzero(cdf <= tail)          # k = largest t with P(W+ <= t) <= tail
    if ok.size == 0:
        return Interval(est, float(walsh[0]), float(walsh[-1]), lf,
                        "Hodges-Lehmann / signed-rank (clipped)")
    k = int(ok[-1]) + 1                       # the k-th smallest / largest Walsh averages
    return Interval(est, float(walsh[k - 1]), float(walsh[-k]), lf,
                    "Hodges-Lehmann / signed-rank")


def wilcoxon_signed_rank(diffs: ArrayLike, alternative: str = "greater") -> TestResult:
    """Wilcoxon signed-rank test (scipy.stats.wilcoxon, exact for small n) on paired
    differences: is the candidate's side of each block systematically larger?"""
    d = _as_1d_float(diffs, "diffs")
    d = d[d != 0]
    if d.size == 0:
        return TestResult(_NAN, 1.0, "Wilcoxon signed-rank")
    r = _st.wilcoxon(d, alternative=alternative)
    return TestResult(float(r.statistic), float(r.pvalue), "Wilcoxon signed-rank")


def min_pairs_signed_rank(alpha: float) -> int:
    """Fewest paired differences for which a one-sided exact Wilcoxon signed-rank test can
    give p < alpha at all. With n pairs the smallest p is 2^-n (every difference on the
    tested side), so n must exceed log2(1/alpha): 5 at alpha 0.05. A check with fewer pairs
    cannot find anything, whatever the data, so it has to report rather than pass."""
    a = _check_level(alpha)
    n = 1
    while 0.5 ** n >= a:
        n += 1
    return n


def mann_whitney_u(base: ArrayLike, cand: ArrayLike, alternative: str = "two-sided") -> TestResult:
    """Mann-Whitney U rank test (scipy.stats.mannwhitneyu): did the whole distribution shift?

    Rank-based, so a few huge outliers cannot dominate. ``alternative="greater"`` tests
    whether cand is stochastically larger than base (e.g. slower). The statistic is U of
    cand. The p-value is exact for small tie-free samples (min size <= 8), otherwise normal
    approximation with tie and continuity correction (scipy's 'auto' rule, named in method).
    NaN result when either sample is empty.
    """
    if alternative not in ("two-sided", "less", "greater"):
        raise ValueError(
            f"alternative must be 'two-sided', 'less' or 'greater', got {alternative!r}"
        )
    xb = _as_1d_float(base, "base")
    xc = _as_1d_float(cand, "cand")
    if xb.size == 0 or xc.size == 0:
        return TestResult(_NAN, _NAN, f"mann-whitney-u ({alternative})")
    has_ties = np.unique(np.concatenate([xb, xc])).size < xb.size + xc.size
    how = "exact" if min(xb.size, xc.size) <= 8 and not has_ties else "asymptotic"
    res = _st.mannwhitneyu(xc, xb, alternative=alternative, method=how)
    p = float(res.pvalue)
    if math.isnan(p):  # e.g. every value tied: no evidence of any shift
        p = 1.0
    return TestResult(float(res.statistic), p, f"mann-whitney-u ({how}, {alternative})")


def sign_flip_test_paired(diffs: ArrayLike, alternative: str = "two-sided",
                          n_resamples: int = 100_000, seed: int = 0) -> TestResult:
    """Sign-flip permutation test of paired differences (scipy.stats.permutation_test,
    permutation_type="samples" on one sample): is their mean away from 0?

    Valid whenever the two sides of each pair are exchangeable under H0 (e.g. one prompt
    sampled on both runners from the same distribution), with no assumption on the shape:
    the p-value is exact when 2^n <= n_resamples, otherwise Monte Carlo with a fixed seed.
    Ties and zeros are fine (all-zero differences give p = 1). NaN when empty."""
    d = _as_1d_float(diffs, "diffs")
    if d.size == 0:
        return TestResult(_NAN, _NAN, f"sign-flip permutation ({alternative})")
    if not np.any(d):
        return TestResult(0.0, 1.0, f"sign-flip permutation ({alternative})")
    exact = 2 ** d.size <= n_resamples
    kw = dict(permutation_type="samples", alternative=alternative, n_resamples=n_resamples)
    try:
        r = _st.permutation_test((d,), np.mean, rng=np.random.default_rng(seed), **kw)
    except TypeError:       # scipy < 1.15 names the generator random_state
        r = _st.permutation_test((d,), np.mean, random_state=np.random.default_rng(seed), **kw)
    how = "exact" if exact else f"Monte Carlo, {n_resamples} resamples"
    return TestResult(float(r.statistic), min(1.0, float(r.pvalue)),
                      f"sign-flip permutation ({how}, {alternative})")


# ---- accuracy (binary outcomes) ---------------------------------------------------------


def mcnemar_exact(base_correct: ArrayLike, cand_correct: ArrayLike) -> TestResult:
    """Exact McNemar test for paired binary outcomes (same eval items for both runs).

    Only discordant items carry information: b = base right & cand wrong, c = base wrong &
    cand right. Under H0 each discordant item is a fair coin, so p = binomtest(b, b+c, 0.5),
    two-sided and exact (no chi-square approximation, which is poor for the small b+c typical
    of a regression). statistic = b - c (positive: candidate lost items). p = 1 when b+c = 0.
    """
    base, cand = _paired_binary(base_correct, cand_correct)
    b = int(np.sum(base & ~cand))
    c = int(np.sum(~base & cand))
    method = "mcnemar-exact (binomial on discordant pairs)"
    if b + c == 0:
        return TestResult(0.0, 1.0, method)
    p = float(_st.binomtest(b, b + c, 0.5, alternative="two-sided").pvalue)
    return TestResult(float(b - c), min(1.0, p), method)


def sign_test_exact(k_plus: int, k_minus: int, alternative: str = "greater") -> TestResult:
    """Exact sign test: of k_plus + k_minus discordant pairs, is "plus" more (less, either)
    frequent than a fair coin gives? p = binomtest(k_plus, k_plus + k_minus, 0.5); 1 when
    there are no discordant pairs. statistic = k_plus - k_minus."""
    method = f"exact sign test (binomial on discordant pairs, {alternative})"
    if k_plus + k_minus == 0:
        return TestResult(0.0, 1.0, method)
    p = float(_st.binomtest(k_plus, k_plus + k_minus, 0.5, alternative=alternative).pvalue)
    return TestResult(float(k_plus - k_minus), min(1.0, p), method)


def proportion_ci_wilson(successes: int, n: int, level: float = 0.95) -> Interval:
    """Wilson score CI for a binomial proportion (accuracy).

    Unlike the Wald interval it stays inside [0, 1] and does not collapse to zero width at
    0/n or n/n. NaN interval when n = 0.
    """
    lf = _check_level(level)
    for name, v in (("successes", successes), ("n", n)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            if not (isinstance(v, (float, np.floating)) and float(v).is_integer()):
                raise ValueError(f"{name} must be an integer, got {v!r}")
    k, m = int(successes), int(n)
    if m < 0 or not (0 <= k <= m):
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    method = "wilson"
    if m == 0:
        return Interval(_NAN, _NAN, _NAN, lf, method)
    ci = _st.binomtest(k, m).proportion_ci(confidence_level=lf, method="wilson")
    return Interval(k / m, float(ci.low), float(ci.high), lf, method)


def paired_diff_proportion_ci(
    base_correct: ArrayLike, cand_correct: ArrayLike, level: float = 0.95
) -> Interval:
    """CI for accuracy(cand) - accuracy(base) on the same items: Agresti-Min adjusted Wald.

    Pairing removes item-difficulty variance, so the interval is much tighter than two
    independent Wilson intervals. Agresti & Min (2005): add 0.5 to each cell of the 2x2
    table (n + 2 in all) and use the Wald interval of the paired difference; this fixes the
    plain Wald interval's zero width when there are no discordant pairs. Bounds are clipped
    to [-1, 1]; the estimate is the unadjusted difference. NaN interval when empty.
    """
    lf = _check_level(level)
    base, cand = _paired_binary(base_correct, cand_correct)
    method = "agresti-min adjusted wald (paired)"
    n = base.size
    if n == 0:
        return Interval(_NAN, _NAN, _NAN, lf, method)
    b = np.sum(base & ~cand) + 0.5  # base right, cand wrong
    c = np.sum(~base & cand) + 0.5  # base wrong, cand right
    m = n + 2.0
    diff = (c - b) / m
    var = ((b + c) - (c - b) ** 2 / m) / m**2
    z = float(_st.norm.ppf(0.5 + lf / 2.0))
    half = z * math.sqrt(max(float(var), 0.0))
    est = float(cand.mean() - base.mean())
    return Interval(est, max(-1.0, float(diff - half)), min(1.0, float(diff + half)), lf, method)


# ---- means and summaries ----------------------------------------------------------------


def mean_ci_t(samples: ArrayLike, level: float = 0.95) -> Interval:
    """Student-t CI for the mean (scipy.stats.t): for roughly normal per-run aggregates.

    E.g. throughput over a handful of repeated runs, where t (not z) matters. With n < 2 the
    spread is unknown, so lo = hi = estimate and the method says so; NaN when empty.
    """
    lf = _check_level(level)
    x = _as_1d_float(samples)
    n = x.size
    if n == 0:
        return Interval(_NAN, _NAN, _NAN, lf, "student-t")
    mean = float(np.mean(x))
    if n < 2:
        return Interval(mean, mean, mean, lf, "student-t (n<2: no interval)")
    sem = float(np.std(x, ddof=1)) / math.sqrt(n)
    if sem == 0.0 or not math.isfinite(sem):
        return Interval(mean, mean, mean, lf, "student-t")
    lo, hi = _st.t.interval(lf, n - 1, loc=mean, scale=sem)
    return Interval(mean, float(lo), float(hi), lf, "student-t")


def mean_diff_welch(a: ArrayLike, b: ArrayLike, level: float = 0.95
                    ) -> tuple[Interval, TestResult]:
    """mean(a) - mean(b) with a Welch t CI, and the two-sided Welch t test
    (scipy.stats.ttest_ind, unequal variances): for two groups of per-run estimates, e.g.
    A/A runs whose engines were built in one order against those built in the other.
    NaN (and the method saying why) when a group has fewer than 2 values."""
    lf = _check_level(level)
    x, y = _as_1d_float(a), _as_1d_float(b)
    method = "Welch t (unequal variances)"
    if x.size < 2 or y.size < 2:
        why = f"{method}: a group has < 2 values"
        est = float(x.mean() - y.mean()) if x.size and y.size else _NAN
        return Interval(est, _NAN, _NAN, lf, why), TestResult(_NAN, _NAN, why)
    res = _st.ttest_ind(x, y, equal_var=False)
    ci = res.confidence_interval(confidence_level=lf)
    return (Interval(float(x.mean() - y.mean()), float(ci.low), float(ci.high), lf, method),
            TestResult(float(res.statistic), float(res.pvalue), method))


def summarize_latency(samples_ms: ArrayLike, percentiles: Sequence[float] = (50, 90, 99)
                      ) -> dict[str, float | int]:
    """Descriptive latency summary as `vllm bench serve` computes its figures: mean, median,
    std (numpy's, ddof 0), one ``pNN`` per entry of ``percentiles`` (named as vLLM's
    process_one_metric names them: the whole number where ``q`` is one, ``p99`` for 99 or
    99.0, else ``str(q)``, ``p99.9``) and max (floats), and n (int).

    NaNs (failed requests) are dropped and not counted in n; empty input gives NaNs, n = 0.
    Percentiles use the same 'linear' definition as :func:`percentile`.
    """
    x = _as_1d_float(samples_ms, "samples_ms")
    keys = [f"p{int(q)}" if int(q) == q else f"p{q}" for q in percentiles]
    if x.size == 0:
        return {**dict.fromkeys(["mean", "median", "std", *keys, "max"], _NAN), "n": 0}
    pct = np.percentile(x, list(percentiles))
    return {"mean": float(np.mean(x)), "median": float(np.median(x)), "std": float(np.std(x)),
            **{k: float(v) for k, v in zip(keys, pct)}, "max": float(np.max(x)),
            "n": int(x.size)}
