"""The A/A shift projection (stats_across_runs.shifted_detection_aa) against the gate's own decision on
shifted data: a uniform slowdown applied to each simulated run's per-wave log ratios, then
judged the way harness/checks/latency.py judges a blocked latency check."""
import math

import numpy as np
import pytest

from mrbench.harness.checks import stats, stats_across_runs

ALPHA, BAR = 0.05, 0.03


def _judge(logr: np.ndarray) -> tuple[float, float, bool]:
    """(relative HL, relative CI low, regression?) as latency.latency_check decides."""
    hl = stats.hodges_lehmann_ci_signed_rank(logr, level=1 - 2 * ALPHA)
    p = stats.wilcoxon_signed_rank(logr, alternative="greater").p_value
    rel = math.expm1(hl.estimate)
    return rel, math.expm1(hl.lo), bool(p < ALPHA and rel > BAR)


@pytest.mark.parametrize("shift", [0.0, 0.02, 0.05, 0.10, 0.20])
def test_projection_matches_the_gate_on_shifted_runs(shift: float) -> None:
    rng = np.random.default_rng(7)
    runs = [rng.normal(0.0, 0.15, size=16) for _ in range(200)]   # 16 waves, A/A
    judged = [_judge(r) for r in runs]
    projected = stats_across_runs.shifted_detection_aa([d for d, _, _ in judged],
                                           [lo for _, lo, _ in judged], shift, BAR)
    actual = np.mean([_judge(r + math.log1p(shift))[2] for r in runs])
    # the signed-rank CI and test are dual up to the test's discreteness: a run or two may
    # fall on either side of the boundary
    assert abs(projected - actual) <= 0.02


def test_projection_at_zero_is_the_false_alarm_rate_and_grows_with_the_shift() -> None:
    rng = np.random.default_rng(3)
    judged = [_judge(rng.normal(0.0, 0.1, size=16)) for _ in range(100)]
    d, lo, alarm = zip(*judged)
    assert stats_across_runs.shifted_detection_aa(d, lo, 0.0, BAR) == pytest.approx(np.mean(alarm),
                                                                        abs=0.02)
    rates, mde = stats_across_runs.projected_mde_aa(d, lo, BAR, [0.02, 0.05, 0.1, 0.2, 0.5])
    vals = list(rates.values())
    assert vals == sorted(vals) and vals[-1] == 1.0
    assert mde is not None and rates[mde] >= 0.8
    assert all(r < 0.8 for s, r in rates.items() if s < mde)


def test_projection_without_runs_is_not_a_number_and_mismatch_is_an_error() -> None:
    assert math.isnan(stats_across_runs.shifted_detection_aa([], [], 0.1, BAR))
    with pytest.raises(ValueError):
        stats_across_runs.shifted_detection_aa([0.1, 0.2], [0.0], 0.1, BAR)
    _, mde = stats_across_runs.projected_mde_aa([0.0], [-0.5], BAR, [0.05, 0.1])
    assert mde is None


def test_latency_bar_follows_the_suite_and_entry_overrides() -> None:
    from mrbench.harness.campaigns.readings import latency_bar
    from mrbench.harness.record.suite import Suite
    suite = Suite.model_validate(dict(
        name="s", thresholds=dict(latency_rel=0.05, median_rel=0.03),
        workloads=[dict(id="spec", workload="spec-decode"),
                   dict(id="spec-wide", workload="spec-decode",
                        thresholds=dict(median_rel=0.08))]))
    assert latency_bar(suite, "spec", "median_step_ms") == 0.03
    assert latency_bar(suite, "spec.k2-ngram-b4", "p99_step_ms") == 0.05
    assert latency_bar(suite, "spec-wide.k2-ngram-b4", "median_tpot_ms") == 0.08


def test_the_projected_mde_reads_the_same_in_the_cli_and_the_report() -> None:
    from mrbench.harness.record.study_record import Projection
    from mrbench.harness.show.formatting import fmt_projected_mde
    assert fmt_projected_mde(None) == "-"
    assert fmt_projected_mde(Projection(bar=0.03, mde_pct=15.0, runs=55,
                                        rates={"5": 0.2, "15": 0.8})) == "15 % (of 55 runs)"
    assert fmt_projected_mde(Projection(bar=0.03, mde_pct=None, runs=55,
                                        rates={"5": 0.1, "50": 0.5})) == "> 50 %"
