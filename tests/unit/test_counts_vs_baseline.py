"""One runner on both sides (two builds of it): op and allocation counts per phase are
judged candidate against baseline; runners that differ by design are only reported; a
stored reference of another build is "not measured", never an alarm."""
from mrbench.contract import SideResult
from mrbench.harness.checks.compare import compare
from mrbench.harness.checks.counts import reference_check
from mrbench.harness.measure import phases
from mrbench.harness.record import references
from mrbench.harness.record.suite import Thresholds

TH = Thresholds(latency_metrics=[])


def _side(runner="v2", ops_sample=4, allocs=2, steps=3, **resolved):
    ran = {f"ran_{p}": 1 for p in phases.PHASES} | {f"syncs_{p}": 0 for p in phases.PHASES}
    rows = [dict(ran, syncs_hot=0, ops=10 + ops_sample, ops_forward=10, ops_sample=ops_sample,
                 allocs=allocs) for _ in range(steps)]
    return SideResult(profile=rows, resolved=dict(target="vllm", runner=runner, **resolved))


def _by_metric(checks):
    return {c.metric: c for c in checks}


def test_one_extra_op_a_step_is_a_regression_side_against_side():
    same = _by_metric(compare("w", _side(), _side(), TH))
    assert same["ops_vs_baseline"].verdict == "pass"
    assert same["ops_vs_baseline"].note == "identical counts"
    more = _by_metric(compare("w", _side(), _side(ops_sample=5), TH))["ops_vs_baseline"]
    assert more.verdict == "regression" and more.delta == 1.0 and "ops_sample 4.0 -> 5.0" \
        in more.note
    assert _by_metric(compare("w", _side(), _side(allocs=3), TH))["ops_vs_baseline"].verdict \
        == "regression"
    # the per-step figures stay reported (history trends read them)
    info = same["ops_per_step"]
    assert info.verdict == "info" and "ops_vs_baseline" in info.method


def test_runners_that_differ_are_reported_not_judged_side_against_side():
    checks = _by_metric(compare("w", _side("v1"), _side("v2", ops_sample=9), TH))
    assert "ops_vs_baseline" not in checks
    assert checks["ops_per_step"].verdict == "info"


def test_another_batch_sequence_is_reported_not_judged():
    c = _by_metric(compare("w", _side(steps=3), _side(ops_sample=5, steps=4), TH))
    assert c["ops_vs_baseline"].verdict == "info" and "not the same batch sequence" in \
        c["ops_vs_baseline"].note


def test_a_reference_of_another_build_is_not_measured_never_an_alarm():
    cand = _side(ops_sample=9, vllm_version="0.27.0", vllm_commit="abc1234", model="/m/llama")
    ref = dict(counts=dict(ops=14.0, ops_forward=10.0, ops_sample=4.0, allocs=2.0), steps=3,
               key=references.reference_key(dict(cand.resolved, vllm_version="0.26.0")))
    c = reference_check("w", cand, ref, TH)
    assert c.verdict == "info" and c.note.startswith("not measured: the stored reference is "
                                                     "for another build (vllm_version 0.26.0")
    ok = reference_check("w", cand, dict(ref, key=references.reference_key(cand.resolved)), TH)
    assert ok.verdict == "regression"               # the same build: its counts are judged
    legacy = reference_check("w", cand, {k: v for k, v in ref.items() if k != "key"}, TH)
    assert legacy.verdict == "regression"           # an entry with no key: as before
