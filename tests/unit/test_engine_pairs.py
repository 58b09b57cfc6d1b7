"""Engine pairs: the timed waves cut over fresh pairs of engines, and the latency gate
pooling the pairs with a between-pair spread. The numbers are built so the answer is known:
each pair carries an offset of its own for its whole life, as a host-bound vLLM engine
process does (docs/vllm-gpu.md, "Engine pairs")."""
import math

import numpy as np
import pytest

from mrbench.contract import SideResult
from mrbench.harness.checks.latency import latency_check
from mrbench.harness.checks.stats_across_runs import random_effects_mean_hksj
from mrbench.harness.record.suite import Thresholds, WorkloadEntry
from mrbench.harness.run.execute import pair_bounds


def test_pair_bounds_cut_even_shares():
    assert pair_bounds(96, 3) == [0, 32, 64]
    assert pair_bounds(96, 6) == [0, 16, 32, 48, 64, 80]
    assert pair_bounds(10, 3) == [0, 2, 4]          # shares stay even: ABBA is never cut
    assert pair_bounds(5, 3) == [0, 2]              # too few waves: fewer pairs
    assert pair_bounds(8, 1) == [0]
    assert pair_bounds(1, 4) == [0]


def test_engine_pairs_bounded_in_the_suite():
    assert WorkloadEntry(id="a", workload="gsm8k").engine_pairs == 1
    with pytest.raises(ValueError):
        WorkloadEntry(id="a", workload="gsm8k", engine_pairs=0)


def test_one_unit_takes_the_calibrated_spread():
    r = random_effects_mean_hksj([0.03], [0.001], tau_floor=0.02, level=0.90)
    assert r.units == 1 and r.tau == 0.02 and r.tau_source == "calibrated"
    sd = math.sqrt(0.001**2 + 0.02**2)
    assert r.hi - r.lo == pytest.approx(2 * 1.6448536 * sd, rel=1e-6)
    assert r.p_greater == pytest.approx(0.0658, abs=2e-3)    # 0.03 / 0.02 sd: not significant


def test_units_that_spread_more_than_calibrated_widen_the_ci():
    e, se = [0.05, -0.05, 0.04, -0.04], [0.002] * 4
    r = random_effects_mean_hksj(e, se, tau_floor=0.01)
    assert r.tau_source == "these units" and r.tau > 0.03
    quiet = random_effects_mean_hksj([0.001, -0.001, 0.0, 0.0005], se, tau_floor=0.01)
    assert quiet.tau_source == "calibrated" and quiet.tau == 0.01


def test_bad_units_are_left_out():
    r = random_effects_mean_hksj([0.01, float("nan"), 0.02], [0.01, 0.01, 0.0], tau_floor=0.0)
    assert r.units == 1 and r.estimate == pytest.approx(0.01)
    assert math.isnan(random_effects_mean_hksj([], [], tau_floor=0.01).estimate)
    with pytest.raises(ValueError):
        random_effects_mean_hksj([0.01], [0.01], tau_floor=-1.0)


def _paired(rng, offsets: list[float], shift: float = 0.0, waves_per_pair: int = 16,
            n: int = 40) -> tuple[SideResult, SideResult]:
    """Both sides' steps, wave by wave; in pair k the candidate's engine runs
    offsets[k] (+ shift) slower than the baseline's, in every one of its waves."""
    base, cand = [], []
    for k, off in enumerate(offsets):
        for j in range(waves_per_pair):
            w = k * waves_per_pair + j
            for x in rng.lognormal(math.log(2.0), 0.02, n):
                base.append(dict(wave=w, wave_pos=w % 2, engine_pair=k, duration_ms=float(x)))
            for x in rng.lognormal(math.log(2.0 * (1 + off) * (1 + shift)), 0.02, n):
                cand.append(dict(wave=w, wave_pos=1 - w % 2, engine_pair=k,
                                 duration_ms=float(x)))
    return SideResult(steps=base), SideResult(steps=cand)


TH = Thresholds(median_rel=0.02, pair_sd_rel=0.02)


def test_one_slow_engine_pair_is_no_regression_when_pooled():
    """A/A where one pair's candidate engine landed 4 % slow (twice the calibrated sd):
    that pair alone, per wave, is a 'significant' +4 %; over six pairs it is noise."""
    rng = np.random.default_rng(1)
    base, cand = _paired(rng, [0.04, 0.0, -0.01, 0.005, 0.0, -0.005])
    alone = latency_check("w", "median_step_ms", *_paired(rng, [0.04]),
                          Thresholds(median_rel=0.02))       # one pair, no spread allowed
    assert alone.verdict == "regression"
    c = latency_check("w", "median_step_ms", base, cand, TH)
    assert c.verdict == "pass", c.note
    assert len(c.pairs) == 6 and "engine pairs +4.0%" in c.note
    assert "random-effects mean over 6" in c.method


def test_a_shift_in_every_pair_is_caught():
    rng = np.random.default_rng(2)
    offsets = [0.01, -0.015, 0.02, 0.0, -0.01, 0.005]
    c = latency_check("w", "median_step_ms", *_paired(rng, offsets, shift=0.05), TH)
    assert c.verdict == "regression", c.note
    assert c.delta == pytest.approx(1.05 * np.exp(np.mean(np.log1p(offsets))) - 1, abs=0.01)
    assert c.ci[0] < c.delta < c.ci[1]


def test_a_pair_with_too_few_waves_is_left_out_and_said():
    rng = np.random.default_rng(3)
    base, cand = _paired(rng, [0.0, 0.0, 0.0], waves_per_pair=8)
    short = {"steps": [r for r in cand.steps if r["wave"] < 20]}
    b = SideResult(steps=[r for r in base.steps if r["wave"] < 20])
    c = latency_check("w", "median_step_ms", b, SideResult(**short), TH)
    assert len(c.pairs) == 2 and "1 pair(s) of under 6 waves left out" in c.note


# Six engine pairs' (log ratio, standard error) of median step from two gpu-ab runs
# (docs/detection-power.md, "Pooling engine pairs"): an A/A run whose waves swung 2x, and
# the +5 % ruler on a quiet host.
_AA_NOISY = ([-0.0480, 0.0774, 0.0485, 0.0449, -0.0090, 0.0629],
             [0.0627, 0.0631, 0.0621, 0.0277, 0.0551, 0.0469])
_RULER_5 = ([0.0449, 0.0601, 0.0387, 0.0441, 0.0513, 0.0801],
            [0.0051, 0.0101, 0.0085, 0.0124, 0.0112, 0.0398])


def test_six_noisy_pairs_are_judged_on_t_not_normal():
    from scipy import stats as st
    r = random_effects_mean_hksj(*_AA_NOISY, tau_floor=math.log1p(0.02), level=0.90)
    assert r.estimate == pytest.approx(0.0351, abs=1e-3)
    normal_p = st.norm.sf(r.estimate / math.sqrt(1 / np.sum(
        1 / (np.array(_AA_NOISY[1]) ** 2 + r.tau**2))))
    assert normal_p < 0.05 < r.p_greater          # 0.049 under a normal CI, 0.079 here
    assert "Hartung-Knapp" in r.method and "5 df" in r.method


def test_the_ruler_stays_significant():
    r = random_effects_mean_hksj(*_RULER_5, tau_floor=math.log1p(0.02), level=0.90)
    assert math.expm1(r.estimate) > 0.045 and r.p_greater < 0.01   # +5.0 %, p 0.002


def test_units_that_agree_by_chance_never_narrow_the_ci():
    se = [0.01] * 6
    close = random_effects_mean_hksj([0.020, 0.0201, 0.0199, 0.020, 0.0200, 0.0201], se,
                                     tau_floor=0.0)
    t5 = 2.5705818366147395                        # t(5) at 0.975: 95 % two-sided
    assert close.hi - close.estimate == pytest.approx(t5 * 0.01 / math.sqrt(6), rel=1e-6)
