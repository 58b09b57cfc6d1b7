"""Cochran's Q on A/A runs: runs that differ only by their waves' noise show no spread
beyond their CIs; runs that each carry an effect of their own (engine instances that differ
for the run's whole length) do, and tau recovers that effect's size. The campaign readers
(`calibrate`, `power`) report it per latency check."""
import json
import math

import numpy as np
import pytest

from mrbench.harness.campaigns.calibrate import aggregate_calibration
from mrbench.harness.campaigns.power import aggregate_power
from mrbench.harness.checks import stats_across_runs
from mrbench.harness.record.run_record import RunSummary
from mrbench.harness.record.suite import load_suite
from mrbench.harness.show.formatting import fmt_heterogeneity


def test_runs_that_share_one_value_show_no_spread_beyond_their_errors():
    rng = np.random.default_rng(7)
    se = rng.uniform(0.008, 0.012, 400)
    h = stats_across_runs.heterogeneity_cochran_q(rng.normal(0, se), se)
    assert h.runs == 400 and h.df == 399
    assert h.p_value > 0.01 and h.tau < 0.003 and 0.9 < h.se_ratio < 1.1
    assert "Cochran" in h.method


def test_an_effect_of_each_run_is_found_and_sized():
    rng = np.random.default_rng(8)
    se = np.full(400, 0.009)
    est = rng.normal(0, 0.014, 400) + rng.normal(0, se)   # a 1.4 % effect per run
    h = stats_across_runs.heterogeneity_cochran_q(est, se)
    assert h.p_value < 1e-6
    assert h.tau == pytest.approx(0.014, rel=0.15)
    assert h.se_ratio == pytest.approx(math.hypot(0.014, 0.009) / 0.009, rel=0.1)
    assert h.i2 > 0.5


def test_too_few_runs_or_bad_errors_measure_nothing():
    assert math.isnan(stats_across_runs.heterogeneity_cochran_q([0.1, 0.2], [0.01, 0.01]).p_value)
    h = stats_across_runs.heterogeneity_cochran_q([0.1, 0.2, 0.3, np.nan], [0.01, 0, -1, 0.01])
    assert h.runs == 1 and math.isnan(h.q)                # only one usable run
    with pytest.raises(ValueError, match="differ in length"):
        stats_across_runs.heterogeneity_cochran_q([0.1, 0.2, 0.3], [0.01, 0.01])


def _summary(delta, half_width, faults=(), pairs=None):
    checks = [dict(workload="gsm8k", metric="median_step_ms", delta=delta,
                   ci=[delta - half_width, delta + half_width], p_value=0.5,
                   threshold="+3% and significant", verdict="pass", pairs=pairs)]
    return RunSummary.build(checks, [], suite="gpu-quick.gsm8k", target="bundled",
                            baseline="v2", candidate="v2", candidate_faults=list(faults),
                            wall_s=70.0)


def test_calibrate_and_power_report_it_per_latency_check():
    suite = load_suite("gpu-quick:gsm8k")
    # CIs of +-1.6 % (a standard error of ~1 %) around estimates that spread by +-4 %
    wide = [(_summary(d, 0.016), 0) for d in (-0.04, 0.05, -0.03, 0.045, 0.0, -0.05)]
    h = aggregate_calibration(suite, wide).checks["gsm8k/median_step_ms"].heterogeneity
    assert h.runs == 6 and h.p_value < 0.001 and h.tau_pct > 2
    honest = [(_summary(d, 0.016), 0) for d in (-0.01, 0.005, 0.0, 0.012, -0.004, 0.008)]
    h = aggregate_calibration(suite, honest).checks["gsm8k/median_step_ms"].heterogeneity
    assert h.p_value > 0.2
    res = aggregate_power(suite, wide + [(_summary(0.08, 0.016, ["slow-step:7.6"]), 1)])
    lines = fmt_heterogeneity(res.checks)
    assert len(lines) == 1 and "the bar, not the CI" in lines[0]
    assert aggregate_calibration(suite, wide[:2]).checks[
        "gsm8k/median_step_ms"].heterogeneity is None     # two runs: not measured
    json.dumps(res.file_json(), allow_nan=False)


def test_the_campaign_report_shows_it(tmp_path):
    from mrbench.harness.show.campaign_report import render_campaign
    suite = load_suite("gpu-quick:gsm8k")
    wide = [(_summary(d, 0.016), 0) for d in (-0.04, 0.05, -0.03, 0.045, 0.0, -0.05)]
    html = render_campaign(tmp_path, "calibrate", aggregate_calibration(suite, wide)).read_text()
    assert 'id="heterogeneity"' in html and "the bar, not the CI" in html


def test_runs_over_engine_pairs_are_measured_pair_by_pair():
    """Each run's pooled CI already allows for the pairs' spread, so the runs show none
    beyond it; each pair's own figure (its waves only) shows the spread the suite's
    pair_sd_rel is set from."""
    suite = load_suite("gpu-quick:gsm8k")
    rng = np.random.default_rng(11)
    runs = []
    for _ in range(4):
        pairs = [[float(x), 0.003] for x in rng.normal(0, 0.02, 3)]   # 2 % between pairs
        runs.append((_summary(float(np.mean([e for e, _ in pairs])), 0.02, pairs=pairs), 0))
    h = aggregate_calibration(suite, runs).checks["gsm8k/median_step_ms"].heterogeneity
    assert h.units == "engine pairs" and h.runs == 12
    assert 1.0 < h.tau_pct < 3.5 and h.p_value < 1e-6
    line = fmt_heterogeneity(aggregate_calibration(suite, runs).checks)[0]
    assert "12 engine pairs" in line and "pair_sd_rel" in line


def test_the_spread_ratio_agrees_with_q_where_the_units_errors_differ():
    """Pairs that spread +-1.5 %, 18 of them with SEs of 0.5 % and 6 (one noisy run's) with
    SEs of 5 % that overstate their noise, as a run whose waves were disturbed does: Q finds
    the spread, and the ratio reported beside it must say more than 1x (Higgins' H), not
    the 0.6x that sd(estimates) over the RMS error gives."""
    rng = np.random.default_rng(11)
    se = np.r_[np.full(18, 0.005), np.full(6, 0.05)]
    est = rng.normal(0, 0.015, 24) + rng.normal(0, 0.005, 24)
    h = stats_across_runs.heterogeneity_cochran_q(est, se)
    assert h.p_value < 1e-3
    assert h.se_ratio == pytest.approx(math.sqrt(h.q / h.df))
    assert h.se_ratio > 1.5
    assert np.std(est, ddof=1) / math.sqrt(np.mean(se**2)) < 1.0   # what the old ratio read
