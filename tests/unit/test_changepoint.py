"""Behavioural tests for harness/checks/changepoint.py (E-Divisive means change-point detection)."""

import math

import numpy as np
import pandas as pd
import pytest

from mrbench.harness.checks import changepoint as cp
from mrbench.harness.checks.changepoint import ChangePoint, detect, energy_statistic


def lognormal(seed: int, n: int, sigma: float, level: float = 100.0) -> np.ndarray:
    return level * np.exp(np.random.default_rng(seed).normal(0.0, sigma, n))


def indices(res: list[ChangePoint]) -> list[int]:
    return [c.index for c in res]


# ---- the statistic ------------------------------------------------------------------------------

def _q_bruteforce(x: np.ndarray, min_size: int) -> np.ndarray:
    m = x.size
    out = []
    for k in range(min_size, m - min_size + 1):
        xl, xr = x[:k], x[k:]
        between = np.abs(xl[:, None] - xr[None, :]).mean()
        wl = np.abs(xl[:, None] - xl[None, :]).sum() / (k * (k - 1)) if k > 1 else 0.0
        wr = np.abs(xr[:, None] - xr[None, :]).sum() / ((m - k) * (m - k - 1)) if m - k > 1 else 0.0
        out.append(k * (m - k) / m * (2 * between - wl - wr))
    return np.array(out)


@pytest.mark.parametrize("min_size", [1, 2, 3])
def test_energy_statistic_matches_definition(min_size):
    rng = np.random.default_rng(7)
    for m in range(2 * min_size, 16):
        x = rng.lognormal(0, 0.3, m)
        np.testing.assert_allclose(energy_statistic(x, min_size), _q_bruteforce(x, min_size),
                                   rtol=1e-10, atol=1e-12)


def test_energy_statistic_peaks_at_the_step():
    x = np.r_[np.full(6, 10.0), np.full(9, 12.0)]
    assert int(np.argmax(energy_statistic(x))) + 2 == 6


# ---- steps are found -----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(8))
def test_step_in_noisy_series_found_exactly(seed):
    x = lognormal(seed, 10, 0.05)
    x[5:] *= 1.30
    res = detect(x)
    assert indices(res) == [5]
    c = res[0]
    assert c.p_value < 0.05
    assert c.rel_change == pytest.approx(c.after / c.before - 1)
    assert 0.15 < c.rel_change < 0.45
    assert c.before == pytest.approx(np.median(x[:5]))
    assert c.after == pytest.approx(np.median(x[5:]))
    assert c.method == "E-Divisive means, permutation test (199)"


def test_deterministic_count_step_found():
    res = detect([1402, 1402, 1402, 1402, 1404, 1404, 1404, 1404])
    assert indices(res) == [4]
    c = res[0]
    assert (c.before, c.after, c.p_value) == (1402.0, 1404.0, 0.0)
    assert c.rel_change == pytest.approx(2 / 1402)
    assert "constant" in c.method
    # +0.14 % is far below min_rel, but a noise-free count that moves is the signal


def test_deterministic_counts_short_and_multi_step():
    assert indices(detect([7, 7, 7, 9, 9, 9])) == [3]  # n=6: no permutation test could reach 0.05
    assert indices(detect([1402] * 4 + [1404] * 4 + [1406] * 4)) == [4, 8]
    assert indices(detect([3, 3, 3, 3, 5])) == []  # one point after: below min_size
    assert indices(detect([3, 3, 3, 5, 5], min_size=3)) == []


def test_exact_permutation_p_for_eight_runs():
    # A 4/4 split of 8 runs can reach at best p = 2/C(8,4) = 2/70; 199 Monte-Carlo shuffles would
    # scatter around 0.033 and exceed 0.05 for some seeds, so n <= 8 uses all 8! orderings.
    for seed in range(4):
        x = lognormal(seed, 8, 0.05)
        x[4:] *= 1.5
        res = detect(x, seed=seed)
        assert indices(res) == [4]
        assert res[0].p_value == pytest.approx(2 / 70)
        assert "exact" in res[0].method


def test_two_steps_both_found():
    for seed in range(3):
        x = lognormal(seed, 24, 0.05)
        x[8:] *= 1.3
        x[16:] *= 1.3
        res = detect(x)
        assert indices(res) == [8, 16]
        assert all(c.rel_change == pytest.approx(0.3, abs=0.08) for c in res)
        # before/after are the medians between neighbouring changes
        assert res[0].after == pytest.approx(np.median(x[8:16]))
        assert res[1].before == pytest.approx(np.median(x[8:16]))


def test_step_down_and_sorted_output():
    x = lognormal(3, 30, 0.03)
    x[10:] *= 0.7
    x[20:] *= 1.6
    res = detect(x)
    assert indices(res) == [10, 20]
    assert res[0].rel_change < 0 < res[1].rel_change


def test_small_middle_shift_does_not_hide_recent_regression():
    x = lognormal(3, 100, 0.01)
    x[50:] *= 1.03  # real (significant) but below min_rel
    x[98:] *= 1.5   # the last two nightlies regressed
    res = detect(x)
    assert indices(res) == [98]
    assert res[0].rel_change == pytest.approx(0.5, abs=0.05)


# ---- nothing is marked on noise, constants, small shifts -----------------------------------------

@pytest.mark.parametrize("n", [4, 5, 8, 20, 60])
def test_constant_series_has_no_change(n):
    assert detect([3.25] * n) == []
    assert detect(np.zeros(n)) == []


def test_pure_noise_false_mark_rate():
    marked = sum(bool(detect(lognormal(seed, 10 + seed % 21, 0.1))) for seed in range(50))
    assert marked / 50 <= 0.10  # measured 4/50 here; 3.7 % over 2000 series


def test_small_real_step_below_min_rel_not_marked():
    x = lognormal(5, 30, 0.005)
    x[15:] *= 1.02
    assert detect(x) == []
    # it is statistically real: a lower practical threshold marks it
    assert indices(detect(x, min_rel=0.01)) == [15]
    assert indices(detect(x, min_abs=1.0)) == [15]           # |101.9 - 99.9| >= 1: either passes
    assert detect(x, min_rel=None, min_abs=5.0) == []         # absolute threshold alone


def test_zero_before_median():
    res = detect([0, 0, 0, 0, 3, 3, 3, 3.0])
    assert indices(res) == [4] and res[0].rel_change == math.inf
    x = np.r_[np.zeros(6), lognormal(1, 6, 0.05)]
    res = detect(x)
    assert indices(res) == [6] and res[0].rel_change == math.inf


# ---- input handling ------------------------------------------------------------------------------

def test_nan_dropped_but_original_indices_kept():
    x = lognormal(0, 10, 0.05)
    x[5:] *= 1.3
    y = np.insert(x, [0, 2, 5, 5, 9], np.nan)  # NaNs at the start, inside, and just before the step
    assert np.isnan(y[[0, 3, 7, 8, 13]]).all()
    res = detect(y)
    assert indices(res) == [9]  # first finite run of the new regime (x[5])
    assert y[9] == x[5]
    assert res[0].before == pytest.approx(detect(x)[0].before)
    assert indices(detect(pd.Series(list(y), dtype="Float64"))) == [9]
    assert indices(detect([*[1.0] * 3, math.inf, 1.0, *[2.0] * 4])) == [5]


def test_too_short_series():
    assert detect([]) == []
    assert detect([1.0, 5.0, 9.0]) == []
    assert detect([1.0, np.nan, 5.0, 9.0, np.nan]) == []  # 3 finite < 2*min_size
    assert detect([1.0, 1.0, 2.0, 2.0, 3.0], min_size=3) == []
    assert detect([np.nan] * 10) == []


def test_deterministic_for_a_seed():
    x = lognormal(11, 40, 0.05)
    x[13:] *= 1.1
    x[27:] *= 1.1
    first = detect(x, seed=5)
    assert first and detect(x, seed=5) == first
    assert detect(list(x), seed=5) == first
    assert [c.index for c in detect(x, seed=6)] == [c.index for c in first]


def test_max_changes():
    x = np.repeat([1.0, 2.0, 3.0, 4.0, 5.0], 6)
    assert indices(detect(x)) == [6, 12, 18, 24]
    assert len(detect(x, max_changes=2)) == 2
    assert detect(x, max_changes=0) == []


@pytest.mark.parametrize("kw", [dict(alpha=0), dict(alpha=1.5), dict(min_size=0),
                                dict(permutations=0), dict(max_changes=-1),
                                dict(min_rel=None), dict(min_rel=-0.1)])
def test_bad_arguments_raise(kw):
    with pytest.raises(ValueError):
        detect([1.0, 2.0, 3.0, 4.0, 5.0], **kw)


def test_bad_shape_raises():
    with pytest.raises(ValueError):
        detect(np.ones((3, 3)))


def test_exact_threshold_constant():
    # the exact test is used up to 8 runs by default (8! orderings)
    assert cp._EXACT_MAX_ORDERINGS == math.factorial(8)
