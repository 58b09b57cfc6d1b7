"""The gate's decisions on constructed side results: blocked latency, references, warmup
coverage, spec-decode figures. No engine runs here; the numbers are built so the right
answer is known."""
import numpy as np
import pytest

from mrbench.contract import SideResult
from mrbench.harness.checks.counts import reference_check
from mrbench.harness.checks.coverage import dispatch_check
from mrbench.harness.checks.latency import MIN_WAVES, latency_check
from mrbench.harness.checks.spec import spec_summary
from mrbench.harness.record import references
from mrbench.harness.record.suite import Thresholds
from mrbench.harness.run.execute import wave_order

TH = Thresholds(latency_rel=0.25)


def side(step_ms_per_wave: list[np.ndarray]) -> SideResult:
    steps = [dict(wave=w, duration_ms=float(x)) for w, xs in enumerate(step_ms_per_wave)
             for x in xs]
    return SideResult(steps=steps)


def waves(rng, n_waves=8, n=200, scale=1.0):
    return [rng.lognormal(np.log(10 * scale), 0.3, n) for _ in range(n_waves)]


def test_abba_order():
    assert [wave_order(["b", "c"], w) for w in range(4)] == [["b", "c"], ["c", "b"]] * 2


def test_no_change_passes_and_is_blocked():
    rng = np.random.default_rng(0)
    c = latency_check("w", "p99_step_ms", side(waves(rng)), side(waves(rng)), TH)
    assert c.verdict == "pass" and "ABBA waves" in c.method
    assert c.ci[0] < 0 < c.ci[1]


def test_consistent_slowdown_is_a_regression():
    rng = np.random.default_rng(1)
    c = latency_check("w", "p99_step_ms", side(waves(rng)), side(waves(rng, scale=1.6)), TH)
    assert c.verdict == "regression" and c.delta > 0.25 and c.p_value < 0.05


def test_small_significant_slowdown_is_below_the_practical_threshold():
    rng = np.random.default_rng(2)
    c = latency_check("w", "p99_step_ms", side(waves(rng)), side(waves(rng, scale=1.1)), TH)
    assert c.verdict == "pass" and 0 < c.delta < 0.25


def test_a_burst_in_one_wave_is_not_a_regression():
    rng = np.random.default_rng(3)
    base, cand = waves(rng), waves(rng)
    cand[3] = cand[3] * 4.0                       # a neighbour took the CPU for one wave
    pooled = np.percentile(np.concatenate(cand), 99) / np.percentile(np.concatenate(base), 99)
    assert pooled > 1.5                           # what a pooled comparison would see
    c = latency_check("w", "p99_step_ms", side(base), side(cand), TH)
    assert c.verdict == "pass"


def test_too_few_waves_and_samples_is_reported_not_judged():
    rng = np.random.default_rng(4)
    few = [rng.lognormal(2, 0.3, 40) for _ in range(MIN_WAVES - 1)]
    c = latency_check("w", "p99_step_ms", side(few), side([x * 3 for x in few]), TH)
    assert c.verdict == "info" and "not judged" in c.note


def test_reference_check(tmp_path):
    prof = [dict(ops=100, ops_prepare=10, ops_sample=5, allocs=7)] * 3
    resolved = dict(target="bundled", runner="v2", device="cpu", dtype="float32")
    params = dict(k=2, ks=[2], limit=24, wave_size=4)
    references.save(resolved, {"spec": dict(params=params, profile=prof, git_sha="abc")},
                    tmp_path)
    ref = references.load(resolved, "spec", dict(params, limit=99, wave_size=1), tmp_path)
    assert ref is not None                        # limit / wave_size do not change the counts
    assert references.load(resolved, "spec", dict(params, ks=[2, 4]), tmp_path) is not None
    assert references.load(resolved, "spec", dict(params, k=4), tmp_path) is None
    same = reference_check("spec", SideResult(profile=prof), ref, Thresholds())
    assert same.verdict == "pass" and same.note == "identical counts"
    more = [dict(r, ops=102, ops_sample=7) for r in prof]
    worse = reference_check("spec", SideResult(profile=more), ref, Thresholds())
    assert worse.verdict == "regression" and "ops_sample 5.0 -> 7.0" in worse.note
    none = reference_check("spec", SideResult(profile=prof), None, Thresholds())
    assert none.verdict == "info"


def test_dispatch_check_names_the_unwarmed_class():
    warm_both = [dict(phase="warmup", kind="mixed", steps=2),
                 dict(phase="warmup", kind="uniform_decode", steps=3),
                 dict(phase="serve", kind="mixed", steps=5),
                 dict(phase="serve", kind="uniform_decode", steps=50)]
    decode_only = [r for r in warm_both if (r["phase"], r["kind"]) != ("warmup", "mixed")]
    ok = dispatch_check("w", SideResult(), SideResult(dispatch=warm_both))
    bad = dispatch_check("w", SideResult(), SideResult(dispatch=decode_only))
    assert ok.verdict == "pass" and bad.verdict == "regression"
    assert "never warmed: mixed" in bad.note


def test_spec_summary_follows_vllm_definitions():
    reqs = [dict(num_drafts=10, num_draft_tokens=20, num_accepted_tokens=12,
                 accepted_pos_0=8, accepted_pos_1=4),
            dict(num_drafts=10, num_draft_tokens=20, num_accepted_tokens=8,
                 accepted_pos_0=6, accepted_pos_1=2)]
    s = spec_summary(SideResult(requests=reqs))
    assert s["spec_decode_acceptance_rate"] == pytest.approx(100 * 20 / 40)     # percent
    assert s["spec_decode_acceptance_length"] == pytest.approx(1 + 20 / 20)
    assert (s["spec_decode_num_drafts"], s["spec_decode_draft_tokens"],
            s["spec_decode_accepted_tokens"]) == (20, 40, 20)
    assert s["spec_decode_per_position_acceptance_rates"] == pytest.approx([14 / 20, 6 / 20])
    assert spec_summary(SideResult(requests=[dict(output_tokens=3)])) == {}


def test_a_uniform_slowdown_below_the_p99_bar_is_caught_by_the_median():
    """+10 % on every step: under the P99 bar (+25 %), over the median's (+5 %)."""
    rng = np.random.default_rng(5)
    base, cand = side(waves(rng)), side(waves(rng, scale=1.10))
    assert latency_check("w", "p99_step_ms", base, cand, TH).verdict == "pass"
    med = latency_check("w", "median_step_ms", base, cand, Thresholds(median_rel=0.05))
    assert med.verdict == "regression" and 0.05 < med.delta < 0.2, med
    assert "per-wave median ratio" in med.method and med.threshold == "+5% and significant"


def test_a_tail_burst_moves_the_p99_but_not_the_median():
    rng = np.random.default_rng(6)
    base = waves(rng)
    cand = [np.concatenate([x[:-6], x[-6:] * 5]) for x in waves(rng)]   # 3 % of steps stall
    loose = Thresholds(latency_rel=0.25, median_rel=0.05)
    assert latency_check("w", "p99_step_ms", side(base), side(cand), loose).verdict == \
        "regression"
    assert latency_check("w", "median_step_ms", side(base), side(cand), loose).verdict == "pass"


def test_a_median_is_judged_only_blocked_and_only_where_the_suite_sets_its_bar():
    rng = np.random.default_rng(7)
    few = side(waves(rng, n=3)), side(waves(rng, n=3, scale=2.0))       # 3 steps a wave
    c = latency_check("w", "median_step_ms", *few, Thresholds(median_rel=0.05))
    assert c.verdict == "info" and "not judged" in c.note and c.delta > 0.5
    two = side(waves(rng, n_waves=2)), side(waves(rng, n_waves=2, scale=2.0))
    assert latency_check("w", "median_step_ms", *two, Thresholds(median_rel=0.05)
                         ).verdict == "info"                            # 2 waves: drift
    many = side(waves(rng)), side(waves(rng, scale=2.0))
    unset = latency_check("w", "median_step_ms", *many, Thresholds())
    assert unset.verdict == "info" and "sets no median_rel" in unset.note and unset.delta > 0.5
