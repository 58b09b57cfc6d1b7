"""preemption_coverage and prefix_cache_coverage: a side with nothing to show is "not
measured", never a pass; a workload that did not ask gets no check."""
from mrbench.contract import SideResult
from mrbench.harness.checks.kv_cache import preemption_check, prefix_cache_check
from mrbench.harness.record.run_record import Verdict

KV = dict(preemption=dict(num_kv_blocks=17, block_size=32))
PC = dict(prefix_cache=dict(block_size=32))


def side(resolved: dict, **counters: float) -> SideResult:
    return SideResult(resolved=dict(resolved), counters=dict(counters))


def test_preemptions_on_both_sides_pass_with_the_counts():
    c = preemption_check("p", side(KV, num_preemptions=4), side(KV, num_preemptions=3))
    assert c.verdict == Verdict.PASS and (c.baseline, c.candidate, c.delta) == (4, 3, -1)
    assert "4 / 3 preemptions" in c.note and "17 blocks of 32 tokens" in c.note


def test_no_preemption_on_a_side_is_not_measured():
    c = preemption_check("p", side(KV, num_preemptions=4), side(KV, num_preemptions=0))
    assert c.verdict == Verdict.INFO
    assert c.note.startswith("not measured: no request was preempted on the candidate")
    c = preemption_check("p", side(KV), side(KV, num_preemptions=2))
    assert c.verdict == Verdict.INFO and "the baseline reported no preemption count" in c.note


def test_a_workload_that_runs_no_short_cache_gets_no_preemption_check():
    assert preemption_check("g", side({}, num_preemptions=0), side({}, num_preemptions=0)) \
        is None


def test_prefix_hits_on_both_sides_pass_with_the_rates():
    b = side(PC, prefix_cache_hits=50, prefix_cache_queries=200, prefix_cache_hit_rate=0.25)
    c = prefix_cache_check("c", b, b)
    assert c.verdict == Verdict.PASS and c.candidate == 50
    assert "50 of 200 (25.0%)" in c.note


def test_no_prefix_hit_on_a_side_is_not_measured():
    b = side(PC, prefix_cache_hits=50, prefix_cache_queries=200, prefix_cache_hit_rate=0.25)
    c = prefix_cache_check("c", b, side(PC, prefix_cache_hits=0, prefix_cache_queries=200))
    assert c.verdict == Verdict.INFO
    assert c.note.startswith("not measured: no prefix-cache hit on the candidate")
    assert prefix_cache_check("g", side({}), side({})) is None
