"""Per-request P99s with waves but too few requests a wave for a per-wave P99: the gate
resamples whole waves. When a wave's machine state moves all its requests together, a
request bootstrap takes them as independent and alarms far above its level; the wave
bootstrap stays near it, and still sees a real slowdown."""
import numpy as np

from mrbench.contract import SideResult
from mrbench.harness.checks import stats_bootstrap
from mrbench.harness.checks.latency import latency_check
from mrbench.harness.record.suite import Thresholds


def _waves(rng, n_waves=64, per_wave=16, wave_sd=0.2, within_sd=0.1, scale=1.0):
    """Each wave's requests share one log-normal level (the wave's machine state)."""
    return [scale * np.exp(rng.normal(0, wave_sd)) * rng.lognormal(0, within_sd, per_wave)
            for _ in range(n_waves)]


def test_wave_bootstrap_holds_its_level_where_the_request_bootstrap_does_not():
    rng = np.random.default_rng(7)
    trials, pooled, waved = 60, 0, 0
    for t in range(trials):
        b, c = _waves(rng), _waves(rng)
        pooled += stats_bootstrap.ratio_percentile_ci_bootstrap(
            np.concatenate(b), np.concatenate(c), 99, level=0.9, n_boot=300, seed=t).lo > 0
        waved += stats_bootstrap.ratio_percentile_ci_wave_bootstrap(
            b, c, 99, level=0.9, n_boot=300, seed=t).lo > 0
    # one-sided nominal 5 %: the request bootstrap sat near 27 % in 200 trials, the wave one
    # near 7 %; the bounds leave room for 60 trials' binomial spread
    assert pooled / trials > 0.15
    assert waved / trials < 0.15


def _side(per_wave_ms) -> SideResult:
    return SideResult(requests=[dict(wave=w, e2e_ms=float(x)) for w, xs in
                                enumerate(per_wave_ms) for x in xs])


def test_the_gate_resamples_waves_and_sees_a_uniform_slowdown():
    rng = np.random.default_rng(3)
    th = Thresholds(latency_rel=0.05)
    base = _waves(rng, wave_sd=0.05)
    same = latency_check("w", "p99_e2el_ms", _side(base), _side(_waves(rng, wave_sd=0.05)), th)
    assert "wave-cluster bootstrap" in same.method and "64 ABBA waves" in same.method
    slow = latency_check("w", "p99_e2el_ms", _side(base),
                         _side(_waves(rng, wave_sd=0.05, scale=1.5)), th)
    assert slow.verdict == "regression" and slow.ci[0] > 0.05


def test_wave_bootstrap_edges():
    assert np.isnan(stats_bootstrap.ratio_percentile_ci_wave_bootstrap([], [], 99).estimate)
    try:
        stats_bootstrap.ratio_percentile_ci_wave_bootstrap([[1.0]], [[1.0], [2.0]], 99)
    except ValueError as e:
        assert "same waves" in str(e)
    else:
        raise AssertionError("unpaired waves were accepted")
