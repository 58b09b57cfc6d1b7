"""Behavioural tests for harness/checks/stats.py: coverage, known values, determinism, error cases."""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst
from scipy import stats as sps

from mrbench.harness.checks import stats as st
from mrbench.harness.checks import stats_bootstrap

finite = hst.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
samples_st = hst.lists(finite, min_size=1, max_size=60)
q_st = hst.floats(min_value=0, max_value=100)
level_st = hst.floats(min_value=0.5, max_value=0.999)


# ---- percentile ---------------------------------------------------------------------------

@given(samples_st, q_st)
def test_percentile_matches_numpy_linear(xs, q):
    assert st.percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)), rel=1e-12, abs=1e-9)


def test_percentile_accepts_list_array_series_and_drops_nan():
    xs = [1.0, 2.0, float("nan"), 3.0, 4.0]
    expected = float(np.percentile([1, 2, 3, 4], 90))
    for data in (xs, np.array(xs), pd.Series(xs), pd.Series([1, 2, None, 3, 4], dtype="Float64")):
        assert st.percentile(data, 90) == pytest.approx(expected)


def test_percentile_empty_and_all_nan_are_nan():
    assert math.isnan(st.percentile([], 50))
    assert math.isnan(st.percentile([float("nan")] * 3, 50))


@pytest.mark.parametrize("q", [-1, 100.5, float("nan"), "p99", None])
def test_percentile_rejects_invalid_q(q):
    with pytest.raises(ValueError, match="q must"):
        st.percentile([1, 2, 3], q)


def test_percentile_rejects_2d_input():
    with pytest.raises(ValueError, match="1-D"):
        st.percentile(np.ones((3, 3)), 50)


# ---- order-statistic CI ---------------------------------------------------------------------

def test_order_statistic_ci_coverage_on_simulated_data():
    """Exact method: coverage >= nominal (allowing Monte Carlo noise), for skewed data."""
    rng = np.random.default_rng(123)
    true_p90 = -math.log(0.1)  # Exp(1)
    true_p50 = math.log(2.0)
    reps = 400
    hits90 = hits50 = 0
    for _ in range(reps):
        x = rng.exponential(size=60)
        a = st.percentile_ci_order_statistic(x, 90)
        b = st.percentile_ci_order_statistic(x, 50)
        assert a.method == b.method == "order-statistic"
        hits90 += a.lo <= true_p90 <= a.hi
        hits50 += b.lo <= true_p50 <= b.hi
    assert 0.92 <= hits90 / reps <= 1.0
    assert 0.92 <= hits50 / reps <= 1.0


def test_order_statistic_ci_matches_scipy_quantile_test():
    rng = np.random.default_rng(7)
    for n in (10, 37, 200):
        for q in (10, 50, 90):
            for level in (0.9, 0.95, 0.99):
                x = rng.lognormal(size=n)
                iv = st.percentile_ci_order_statistic(x, q, level)
                ref = sps.quantile_test(x, q=0, p=q / 100).confidence_interval(level)
                if not np.isnan(ref.low):
                    assert iv.lo == pytest.approx(ref.low)
                if not np.isnan(ref.high):
                    assert iv.hi == pytest.approx(ref.high)


def test_order_statistic_ci_clips_when_n_too_small():
    x = np.arange(20.0)
    iv = st.percentile_ci_order_statistic(x, 99)
    assert "clipped" in iv.method
    assert iv.hi == 19.0  # clipped to the max
    assert iv.lo <= iv.estimate <= iv.hi
    big = st.percentile_ci_order_statistic(np.arange(2000.0), 99)
    assert "clipped" not in big.method
    assert big.lo < big.estimate < big.hi < 1999.0


@settings(max_examples=60, deadline=None)
@given(samples_st, hst.floats(min_value=1, max_value=99), level_st, level_st)
def test_order_statistic_ci_bounds_are_samples_and_nested_in_level(xs, q, l1, l2):
    lo_level, hi_level = sorted((l1, l2))
    narrow = st.percentile_ci_order_statistic(xs, q, lo_level)
    wide = st.percentile_ci_order_statistic(xs, q, hi_level)
    assert narrow.lo in xs and narrow.hi in xs
    assert narrow.lo <= narrow.hi
    assert wide.lo <= narrow.lo and narrow.hi <= wide.hi
    assert narrow.level == lo_level


@settings(max_examples=60, deadline=None)
@given(samples_st, q_st, hst.floats(min_value=0.01, max_value=0.999))
def test_order_statistic_ci_contains_point_estimate(xs, q, level):
    iv = st.percentile_ci_order_statistic(xs, q, level)
    assert iv.lo <= iv.estimate + 1e-9 * (1 + abs(iv.estimate))
    assert iv.estimate <= iv.hi + 1e-9 * (1 + abs(iv.estimate))


def test_order_statistic_ci_tiny_sample_still_contains_estimate():
    iv = st.percentile_ci_order_statistic([0.0, 1.0], 1, 0.875)
    assert iv.estimate == pytest.approx(0.01)
    assert iv.lo == 0.0 and iv.hi == 1.0


def test_order_statistic_ci_empty_is_nan():
    iv = st.percentile_ci_order_statistic([], 50)
    assert math.isnan(iv.estimate) and math.isnan(iv.lo) and math.isnan(iv.hi)


@pytest.mark.parametrize("level", [0, 1, 95, -0.5, float("nan")])
def test_cis_reject_invalid_level(level):
    for fn in (lambda: st.percentile_ci_order_statistic([1, 2, 3], 50, level),
               lambda: stats_bootstrap.ratio_percentile_ci_bootstrap([1, 2], [1, 2], 50, level),
               lambda: st.proportion_ci_wilson(1, 2, level),
               lambda: st.paired_diff_proportion_ci([1, 0], [1, 1], level),
               lambda: st.mean_ci_t([1, 2, 3], level)):
        with pytest.raises(ValueError, match="level"):
            fn()


@pytest.mark.parametrize("q", [-0.1, 101, float("nan")])
def test_cis_reject_invalid_q(q):
    for fn in (lambda: st.percentile_ci_order_statistic([1, 2, 3], q),
               lambda: stats_bootstrap.ratio_percentile_ci_bootstrap([1, 2], [1, 2], q)):
        with pytest.raises(ValueError, match="q must"):
            fn()


# ---- bootstrap CIs ---------------------------------------------------------------------------

def test_ratio_bootstrap_rejects_bad_n_boot():
    for nb in (0, -5, 2.5):
        with pytest.raises(ValueError, match="n_boot"):
            stats_bootstrap.ratio_percentile_ci_bootstrap([1, 2, 3], [1, 2, 3], 50, n_boot=nb)


def test_ratio_bootstrap_deterministic_and_nan_dropping():
    rng = np.random.default_rng(4)
    base, cand = rng.lognormal(size=(2, 100))
    a = stats_bootstrap.ratio_percentile_ci_bootstrap(base, cand, 75, seed=9)
    b = stats_bootstrap.ratio_percentile_ci_bootstrap(
        pd.Series(np.append(base, np.nan)), np.insert(cand, 3, np.nan), 75, seed=9)
    assert a == b
    e = stats_bootstrap.ratio_percentile_ci_bootstrap([], cand, 75)
    assert math.isnan(e.estimate) and math.isnan(e.lo)


def test_ratio_bootstrap_relative_change():
    rng = np.random.default_rng(5)
    base = rng.lognormal(4.0, 0.2, size=500)
    cand = base * 1.10
    iv = stats_bootstrap.ratio_percentile_ci_bootstrap(base, cand, 50)
    assert iv.estimate == pytest.approx(0.10)
    assert iv.lo > 0 and iv.lo <= iv.estimate <= iv.hi
    same = stats_bootstrap.ratio_percentile_ci_bootstrap(base, base.copy(), 50)
    assert same.estimate == 0.0 and same.lo < 0 < same.hi
    assert stats_bootstrap.ratio_percentile_ci_bootstrap(base, cand, 50, seed=3) == \
        stats_bootstrap.ratio_percentile_ci_bootstrap(base, cand, 50, seed=3)


def test_ratio_bootstrap_zero_base_percentile():
    up = stats_bootstrap.ratio_percentile_ci_bootstrap([0.0] * 5, [1.0, 2.0, 3.0], 50)
    assert up.estimate == math.inf and up.hi == math.inf and up.lo == math.inf
    both_zero = stats_bootstrap.ratio_percentile_ci_bootstrap([0.0] * 5, [0.0] * 4, 50)
    assert math.isnan(both_zero.estimate) and math.isnan(both_zero.lo) and math.isnan(both_zero.hi)
    # base percentile sometimes zero in resamples: interval unbounded above, no NaN bounds
    mixed = stats_bootstrap.ratio_percentile_ci_bootstrap([0, 0, 0, 1, 2], [1, 2, 3, 4], 50)
    assert mixed.hi == math.inf and not math.isnan(mixed.lo)


# ---- Mann-Whitney ----------------------------------------------------------------------------

def test_mann_whitney_exact_small_sample_and_direction():
    r = st.mann_whitney_u([1, 2, 3], [4, 5, 6], alternative="greater")
    assert r.p_value == pytest.approx(1 / 20)  # only 1 of C(6,3) orderings is this extreme
    assert r.statistic == 9.0  # U of cand: it beats base in all 3*3 pairs
    assert "exact" in r.method
    less = st.mann_whitney_u([1, 2, 3], [4, 5, 6], alternative="less")
    assert less.p_value == pytest.approx(1.0)
    two = st.mann_whitney_u([1, 2, 3], [4, 5, 6])
    assert two.p_value == pytest.approx(2 / 20)


def test_mann_whitney_large_shift_and_null():
    rng = np.random.default_rng(6)
    base = rng.exponential(10, size=200)
    slower = st.mann_whitney_u(base, base + 5, alternative="greater")
    assert slower.p_value < 1e-6 and "asymptotic" in slower.method
    null = st.mann_whitney_u(base, rng.exponential(10, size=200))
    assert null.p_value > 0.01


def test_mann_whitney_ties_nan_empty_and_bad_alternative():
    tied = st.mann_whitney_u([1, 1, 1], [1, 1, 1])
    assert tied.p_value == pytest.approx(1.0)
    a = st.mann_whitney_u([1, 2, float("nan"), 3], pd.Series([4, 5, 6]), alternative="greater")
    assert a.p_value == pytest.approx(1 / 20)
    e = st.mann_whitney_u([], [1, 2])
    assert math.isnan(e.p_value) and math.isnan(e.statistic)
    with pytest.raises(ValueError, match="alternative"):
        st.mann_whitney_u([1, 2], [3, 4], alternative="larger")


# ---- McNemar --------------------------------------------------------------------------------

def _pairs(n11, b, c, n00):
    """base/cand outcome arrays with n11 both-right, b base-only, c cand-only, n00 both-wrong."""
    base = [1] * n11 + [1] * b + [0] * c + [0] * n00
    cand = [1] * n11 + [0] * b + [1] * c + [0] * n00
    return base, cand


@pytest.mark.parametrize("b,c,expected", [
    (10, 0, 2 * 0.5 ** 10),
    (0, 10, 2 * 0.5 ** 10),
    (3, 1, 2 * (1 + 4) / 16),          # 2 * P(X <= 1), X ~ Bin(4, .5) = 2 * 5/16
    (5, 5, 1.0),
    (1, 0, 1.0),
    (8, 2, 2 * (1 + 10 + 45) / 1024),  # 2 * P(X <= 2), X ~ Bin(10, .5)
])
def test_mcnemar_exact_against_hand_computed_binomial(b, c, expected):
    base, cand = _pairs(30, b, c, 7)
    r = st.mcnemar_exact(base, cand)
    assert r.p_value == pytest.approx(expected)
    assert r.statistic == b - c
    assert "mcnemar" in r.method


def test_mcnemar_no_discordant_pairs_and_input_types():
    r = st.mcnemar_exact([1, 0, 1], [1, 0, 1])
    assert r.p_value == 1.0 and r.statistic == 0.0
    base, cand = _pairs(5, 10, 0, 5)
    as_bool = st.mcnemar_exact(np.array(base, dtype=bool), pd.Series(cand, dtype=bool))
    assert as_bool.p_value == pytest.approx(2 * 0.5 ** 10)
    assert st.mcnemar_exact([], []).p_value == 1.0


def test_mcnemar_rejects_mismatched_nan_and_nonbinary():
    with pytest.raises(ValueError, match="equal lengths"):
        st.mcnemar_exact([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="NaN"):
        st.mcnemar_exact([1, float("nan")], [1, 0])
    with pytest.raises(ValueError, match="0/1"):
        st.mcnemar_exact([1, 2], [1, 0])


# ---- Wilson ---------------------------------------------------------------------------------

@pytest.mark.parametrize("k,n,lo,hi", [
    (0, 10, 0.0, 0.277533),       # z^2/(n+z^2)
    (10, 10, 0.722467, 1.0),
    (50, 100, 0.403832, 0.596168),
    (1, 1, 0.206549, 1.0),
])
def test_wilson_known_values(k, n, lo, hi):
    iv = st.proportion_ci_wilson(k, n)
    assert iv.estimate == pytest.approx(k / n)
    assert iv.lo == pytest.approx(lo, abs=1e-5)
    assert iv.hi == pytest.approx(hi, abs=1e-5)
    assert iv.method == "wilson"


@given(hst.integers(1, 2000).flatmap(lambda n: hst.tuples(hst.integers(0, n), hst.just(n))),
       level_st)
def test_wilson_in_unit_interval_and_contains_estimate(kn, level):
    k, n = kn
    iv = st.proportion_ci_wilson(k, n, level)
    assert 0.0 <= iv.lo <= iv.estimate <= iv.hi <= 1.0


def test_wilson_invalid_and_empty():
    for k, n in ((11, 10), (-1, 10), (1, -1), (0.5, 2)):
        with pytest.raises(ValueError):
            st.proportion_ci_wilson(k, n)
    e = st.proportion_ci_wilson(0, 0)
    assert math.isnan(e.estimate) and math.isnan(e.lo) and math.isnan(e.hi)
    assert st.proportion_ci_wilson(np.int64(3), np.int64(4)).estimate == 0.75


# ---- paired difference of proportions ----------------------------------------------------------

def test_paired_diff_proportion_known_value_and_method():
    base, cand = _pairs(60, 5, 15, 20)  # n = 100
    iv = st.paired_diff_proportion_ci(base, cand)
    assert iv.estimate == pytest.approx(0.10)
    # Agresti-Min: cells +0.5 -> b=5.5, c=15.5, n=102
    d = 10 / 102
    se = math.sqrt((21 - 10 ** 2 / 102) / 102 ** 2)
    assert iv.lo == pytest.approx(d - 1.959964 * se, abs=1e-5)
    assert iv.hi == pytest.approx(d + 1.959964 * se, abs=1e-5)
    assert "agresti-min" in iv.method.lower()


def test_paired_diff_proportion_no_discordance_has_nonzero_width():
    iv = st.paired_diff_proportion_ci([1] * 30 + [0] * 10, [1] * 30 + [0] * 10)
    assert iv.estimate == 0.0 and iv.lo < 0 < iv.hi


def test_paired_diff_proportion_coverage():
    rng = np.random.default_rng(8)
    reps, n = 400, 80
    hits = 0
    # items: base right w.p. .70; cand agrees with base except a few flips -> true diff +0.05
    probs = np.array([0.62, 0.08, 0.13, 0.17])  # (1,1), (1,0), (0,1), (0,0)
    true_diff = probs[2] - probs[1]
    for _ in range(reps):
        cells = rng.choice(4, size=n, p=probs)
        base = np.isin(cells, (0, 1))
        cand = np.isin(cells, (0, 2))
        iv = st.paired_diff_proportion_ci(base, cand)
        hits += iv.lo <= true_diff <= iv.hi
    assert 0.92 <= hits / reps <= 0.99


def test_paired_diff_proportion_bounds_and_errors():
    iv = st.paired_diff_proportion_ci([0], [1])
    assert -1.0 <= iv.lo <= iv.hi <= 1.0 and iv.estimate == 1.0
    with pytest.raises(ValueError, match="equal lengths"):
        st.paired_diff_proportion_ci([1, 0], [1])
    e = st.paired_diff_proportion_ci([], [])
    assert math.isnan(e.estimate) and math.isnan(e.lo)


# ---- mean t CI ----------------------------------------------------------------------------

def test_mean_ci_t_known_value():
    iv = st.mean_ci_t([1, 2, 3, 4, 5])
    half = 2.776445 * math.sqrt(2.5) / math.sqrt(5)  # t_{.975,4} * s / sqrt(n)
    assert iv.estimate == 3.0
    assert iv.lo == pytest.approx(3 - half, abs=1e-5)
    assert iv.hi == pytest.approx(3 + half, abs=1e-5)
    assert "student-t" in iv.method


def test_mean_ci_t_coverage():
    rng = np.random.default_rng(9)
    reps = 600
    hits = sum(
        (iv := st.mean_ci_t(rng.normal(5.0, 2.0, size=6))).lo <= 5.0 <= iv.hi for _ in range(reps)
    )
    assert 0.92 <= hits / reps <= 0.98


def test_mean_ci_t_small_and_degenerate():
    one = st.mean_ci_t([7.0, float("nan")])
    assert one.estimate == one.lo == one.hi == 7.0 and "n<2" in one.method
    const = st.mean_ci_t([2.0] * 5)
    assert const.lo == const.hi == 2.0
    e = st.mean_ci_t([])
    assert math.isnan(e.estimate) and math.isnan(e.lo) and math.isnan(e.hi)


# ---- summary ------------------------------------------------------------------------------

def test_summarize_latency_values_and_types():
    xs = pd.Series(list(range(1, 101)) + [None], dtype="float64")
    s = st.summarize_latency(xs)
    assert set(s) == {"mean", "median", "std", "p50", "p90", "p99", "max", "n"}
    assert s["n"] == 100
    assert s["mean"] == pytest.approx(50.5)
    assert s["median"] == s["p50"] == pytest.approx(50.5)
    assert s["p90"] == pytest.approx(np.percentile(np.arange(1, 101), 90))
    assert s["p99"] == pytest.approx(np.percentile(np.arange(1, 101), 99))
    assert s["max"] == 100.0 and s["std"] == pytest.approx(np.std(np.arange(1, 101)))
    assert all(isinstance(v, float) for k, v in s.items() if k != "n")
    assert set(st.summarize_latency(xs, [99.9])) == {"mean", "median", "std", "p99.9",
                                                     "max", "n"}     # vLLM's key
    # vLLM's spelling (process_one_metric): a whole number as one, else str(q) in full
    assert {k for k in st.summarize_latency(xs, [99.0, 33.3333, 12.5]) if k[0] == "p"} == \
        {"p99", "p33.3333", "p12.5"}


def test_summarize_latency_empty():
    for data in ([], np.array([np.nan, np.nan])):
        s = st.summarize_latency(data)
        assert s["n"] == 0
        assert all(math.isnan(v) for k, v in s.items() if k != "n")


@given(samples_st)
def test_summarize_latency_is_ordered(xs):
    s = st.summarize_latency(xs)
    assert s["p50"] <= s["p90"] + 1e-9 <= s["p99"] + 2e-9 <= s["max"] + 3e-9
    assert s["n"] == len(xs)


def test_order_statistic_ci_contains_estimate_at_a_tiny_quantile():
    """Regression (hypothesis found it): (n-1)*q/100 ~ 6e-10 rounded to 0, but the
    interpolated estimate is above x_(1); the interval must still contain it."""
    iv = st.percentile_ci_order_statistic([0.0, 2.0], 5.960464477539063e-08, 0.5)
    assert iv.lo <= iv.estimate <= iv.hi


# ---- blocked (paired) statistics -------------------------------------------------------------

def test_min_samples_for_a_p99_ci():
    assert st.min_samples_percentile_ci(99, 0.90) == 299
    n = st.min_samples_percentile_ci(99, 0.90)
    x = np.random.default_rng(0).random(n)
    assert st.percentile_ci_order_statistic(x, 99, 0.90).method == "order-statistic"
    assert "clipped" in st.percentile_ci_order_statistic(x[:-1], 99, 0.90).method


@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_signed_rank_null_matches_enumeration(n):
    import itertools
    ranks = np.arange(1, n + 1)
    w = [int(ranks[np.array(s, bool)].sum()) for s in itertools.product([0, 1], repeat=n)]
    emp = np.cumsum(np.bincount(w, minlength=n * (n + 1) // 2 + 1)) / 2 ** n
    np.testing.assert_allclose(st._signed_rank_null_cdf(n), emp)


def test_hodges_lehmann_ci_covers_at_its_level():
    rng = np.random.default_rng(7)
    cover = 0
    for _ in range(1000):
        iv = st.hodges_lehmann_ci_signed_rank(rng.standard_t(3, 8) + 0.5, 0.90)
        cover += iv.lo <= 0.5 <= iv.hi
        assert iv.lo <= iv.estimate <= iv.hi
    assert cover / 1000 >= 0.88


def test_hodges_lehmann_known_value_and_clipping():
    iv = st.hodges_lehmann_ci_signed_rank([1.0, 2.0, 3.0], 0.95)
    assert iv.estimate == pytest.approx(2.0) and "clipped" in iv.method
    assert (iv.lo, iv.hi) == (1.0, 3.0)


def test_wilcoxon_matches_scipy_and_handles_zeros():
    d = [0.3, -0.1, 0.4, 0.2, 0.5, 0.25, -0.05, 0.35]
    assert st.wilcoxon_signed_rank(d).p_value == pytest.approx(
        sps.wilcoxon(d, alternative="greater").pvalue)
    assert st.wilcoxon_signed_rank([0.0, 0.0]).p_value == 1.0



# ---- sign-flip permutation test (sampled distributions) ---------------------------------


def test_sign_flip_zero_differences_give_p_one():
    assert st.sign_flip_test_paired([0.0] * 10).p_value == 1.0


def test_sign_flip_exact_smallest_p():
    # all 8 differences of one sign: two of the 2^8 sign patterns are as extreme
    r = st.sign_flip_test_paired([1.0] * 8)
    assert r.p_value == pytest.approx(2 / 256)
    assert "exact" in r.method


def test_sign_flip_false_alarm_rate_is_at_most_alpha():
    """Under H0 each prompt's statistic has one distribution on both sides (its own, which
    differs between prompts): the test rejects at most about alpha of the time."""
    rng = np.random.default_rng(7)
    trials, rejections = 400, 0
    for _ in range(trials):
        p = rng.uniform(0.2, 0.9, 10)              # prompt i's chance of a distinct stream
        base, cand = rng.binomial(2, p) / 2, rng.binomial(2, p) / 2
        rejections += st.sign_flip_test_paired(cand - base).p_value < 0.05
    assert rejections / trials <= 0.08


def test_sign_flip_sees_a_collapse():
    rng = np.random.default_rng(3)
    base = rng.binomial(2, np.full(10, 0.9)) / 2
    assert st.sign_flip_test_paired(np.full(10, 0.5) - base).p_value < 0.05


def test_mean_diff_welch_against_the_formula():
    """Welch's CI by hand (Satterthwaite's degrees of freedom) and its two-sided p."""
    a, b = [1.2, 0.4, 2.1, 1.7, 0.9], [-0.5, 0.2, -1.1, 0.1]
    ci, t = st.mean_diff_welch(a, b, level=0.9)
    va, vb = np.var(a, ddof=1) / 5, np.var(b, ddof=1) / 4
    df = (va + vb) ** 2 / (va ** 2 / 4 + vb ** 2 / 3)
    half = sps.t.ppf(0.95, df) * math.sqrt(va + vb)
    d = np.mean(a) - np.mean(b)
    assert ci.estimate == pytest.approx(d)
    assert (ci.lo, ci.hi) == pytest.approx((d - half, d + half))
    assert t.p_value == pytest.approx(2 * sps.t.sf(d / math.sqrt(va + vb), df))
    lone, test = st.mean_diff_welch([1.0], b)
    assert math.isnan(lone.lo) and math.isnan(test.p_value) and "< 2 values" in test.method
