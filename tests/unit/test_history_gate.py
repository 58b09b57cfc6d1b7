"""The latency ratio judged against the history (V2 against V1 over time): the prediction
test, which earlier runs count, and "not measured" until there are enough."""
import math

import numpy as np
import pytest
from scipy import stats as st
from support.history_runs import write_comparison_run

from mrbench.harness.checks import stats_across_runs
from mrbench.harness.checks.history_gate import history_checks
from mrbench.harness.record import history
from mrbench.harness.record.run_record import Check
from mrbench.harness.record.suite import Thresholds

TH = Thresholds(median_rel=0.03)


def _check(delta, verdict="pass", metric="median_step_ms"):
    return dict(workload="g", metric=metric, unit="ms", baseline=1.0, candidate=1 + delta,
                delta=delta, ci=[delta - 0.01, delta + 0.01], p_value=0.01,
                threshold="", method="", verdict=verdict, note="")


def _judge(checks, like, db, thresholds_for):
    """history_checks on checks held as summary.json's dicts, returning dicts."""
    return [c.to_dict() for c in history_checks([Check.model_validate(c) for c in checks],
                                                like, db, thresholds_for)]


def _run(root, name, delta, verdict="pass", faults=(), candidate="v2", day=1):
    return write_comparison_run(root, name, [_check(delta, verdict)], day, verdict, faults,
                                candidate)


LIKE = dict(target="vllm", suite="s", device="cuda", model="m", baseline="v1",
            candidate="v2", run_dir="/tonight")


@pytest.fixture
def db(tmp_path):
    runs = [_run(tmp_path, f"r{i}", d, day=i) for i, d in enumerate((0.18, 0.19, 0.20), 1)]
    # none of these is an earlier clean passing run of the same comparison
    runs += [_run(tmp_path, "regressed", 0.60, verdict="regression", day=4),
             _run(tmp_path, "faulty", 0.90, faults=("seq-lens-sync",), day=5),
             _run(tmp_path, "other", 0.90, candidate="v2@pr", day=6)]
    path = tmp_path / "h.sqlite"
    history.add(path, runs)
    return path


def test_the_ratio_of_each_judged_latency_check_is_stored(db):
    assert [round(v, 3) for _, v in history.earlier_ratios(db, LIKE, "g", "median_step_ms")] \
        == [0.18, 0.19, 0.20]


def test_a_v2_only_slowdown_over_the_earlier_ratios_is_a_regression(db):
    [c] = _judge([_check(0.26)], LIKE, db, lambda w: TH)     # +5.9 % over 1.19
    assert c["metric"] == "median_step_ms_vs_history" and c["verdict"] == "regression"
    assert c["delta"] == pytest.approx(1.26 / math.exp(np.mean(np.log([1.18, 1.19, 1.20])))
                                       - 1)
    assert c["p_value"] < 0.05 and "3 earlier clean passing" in c["method"]


def test_the_runners_own_difference_alone_passes(db):
    [c] = _judge([_check(0.195)], LIKE, db, lambda w: TH)
    assert c["verdict"] == "pass" and abs(c["delta"]) < 0.01


def test_a_shift_under_the_bar_passes_even_when_significant(db):
    [c] = _judge([_check(0.25)], LIKE, db, lambda w: Thresholds(median_rel=0.10))
    assert c["verdict"] == "pass" and c["p_value"] < 0.05


def test_too_few_earlier_runs_or_no_history_is_not_measured(db, tmp_path):
    other = dict(LIKE, candidate="v2@build")        # one earlier run of two builds of v2
    [c] = _judge([_check(0.9)], other, db, lambda w: TH)
    assert c["verdict"] == "info" and c["note"].startswith("not measured: 1 earlier")
    [c] = _judge([_check(0.9)], LIKE, tmp_path / "none.sqlite", lambda w: TH)
    assert c["verdict"] == "info" and "no history" in c["note"]


def test_a_ratio_the_run_could_not_measure_is_not_measured_against_the_history(db):
    busy = dict(_check(0.3, verdict="info"), note="not measured: the engine threads were off "
                "their CPUs for 40.0% (baseline): the machine ran other work")
    [c] = _judge([busy], LIKE, db, lambda w: TH)
    assert c["metric"] == "median_step_ms_vs_history" and c["verdict"] == "info"
    assert c["note"].startswith("not measured: this run measured no median_step_ms ratio")
    assert "the machine ran other work" in c["note"] and c["candidate"] is None


def test_only_judged_latency_checks_are_compared(db):
    checks = [_check(0.3, verdict="info"), dict(_check(0.3), metric="syncs_per_step")]
    assert _judge(checks, LIKE, db, lambda w: TH) == []


def test_prediction_shift_t_is_the_prediction_interval_statistic():
    x = np.array([0.1, 0.2, 0.15, 0.12])
    r = stats_across_runs.prediction_shift_t(x, 0.4)
    t = (0.4 - x.mean()) / (x.std(ddof=1) * math.sqrt(1 + 1 / 4))
    assert r.statistic == pytest.approx(t) and r.p_value == pytest.approx(st.t.sf(t, 3))
    assert math.isnan(stats_across_runs.prediction_shift_t([0.1, 0.2], 0.4).p_value)
    assert math.isnan(stats_across_runs.prediction_shift_t([0.1, 0.1, 0.1], 0.4).p_value)


def test_history_rel_sets_the_bar_apart_from_the_runs_own():
    loose = Thresholds(median_rel=0.35, history_rel=0.03)   # a V2-vs-V1 bar, a tight drift bar
    from mrbench.harness.checks.history_gate import bar_of
    assert bar_of(loose, "median_step_ms") == 0.03 and bar_of(loose, "p99_itl_ms") == 0.03
    assert bar_of(TH, "median_step_ms") == 0.03 and bar_of(TH, "p99_itl_ms") == 0.25
