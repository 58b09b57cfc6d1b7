"""vLLM's V2 against V1: one run reports their latency ratio and only the history judges it
(the runners differ by design, by more than a regression between engine starts), while
two builds of one runner, and the bundled runners' calibrated V2-vs-V1 bars, stay judged
within the run. The history keeps a reported ratio and judges the next run against it."""
import numpy as np
import pytest
from support.history_runs import write_comparison_run

from mrbench.contract import SideResult
from mrbench.harness.checks.compare import compare
from mrbench.harness.checks.history_gate import history_checks
from mrbench.harness.record import history
from mrbench.harness.record.run_record import ACROSS_RUNS, judged_across_runs
from mrbench.harness.record.suite import Thresholds

TH = Thresholds(latency_rel=0.05, median_rel=0.03, latency_metrics=["median_step_ms"])


def _side(target: str, runner: str, slow: float, side: str) -> SideResult:
    rng = np.random.default_rng(0 if side == "baseline" else 1)
    rows = [dict(wave=w, wave_pos=(w + (side == "candidate")) % 2, duration_ms=x * slow)
            for w in range(16) for x in rng.lognormal(np.log(0.5), 0.05, size=100)]
    return SideResult(steps=rows, resolved=dict(target=target, runner=runner))


def _latency(target, base_runner, cand_runner, slow=1.3):
    [c] = [c for c in compare("w", _side(target, base_runner, 1.0, "baseline"),
                              _side(target, cand_runner, slow, "candidate"), TH)
           if c.metric == "median_step_ms"]
    return c


def test_vllm_v2_against_v1_reports_the_ratio_and_leaves_it_to_the_history():
    c = _latency("vllm", "v1", "v2")
    assert c.verdict == "info" and c.note.startswith(ACROSS_RUNS) and "--history" in c.note
    assert c.delta == pytest.approx(0.3, abs=0.03)          # the estimate is still there
    assert judged_across_runs(c.verdict, c.note)


@pytest.mark.parametrize("target, base, cand", [("vllm", "v2", "v2"), ("bundled", "v1", "v2")])
def test_one_runner_or_the_bundled_pair_is_judged_within_the_run(target, base, cand):
    c = _latency(target, base, cand)
    assert c.verdict == "regression" and not judged_across_runs(c.verdict, c.note)


def test_the_history_keeps_a_reported_v2_v1_ratio_and_judges_a_v2_only_slowdown(tmp_path):
    runs = [write_comparison_run(tmp_path, f"r{i}",
                                 [_latency("vllm", "v1", "v2", slow=s).to_json_dict()], i)
            for i, s in enumerate((1.18, 1.19, 1.20), 1)]
    db = tmp_path / "h.sqlite"
    history.add(db, runs)
    like = dict(target="vllm", suite="s", device="cuda", model="m", baseline="v1",
                candidate="v2", run_dir="/tonight")
    assert len(history.earlier_ratios(db, like, "w", "median_step_ms")) == 3
    [c] = history_checks([_latency("vllm", "v1", "v2", slow=1.27)], like, db, lambda w: TH)
    assert c.metric == "median_step_ms_vs_history" and c.verdict == "regression"
