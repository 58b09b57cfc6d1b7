"""Prefix caching in the bundled block pool and scheduler, and the KV-cache counters.

The block pool: full blocks hashed as a chain, reference counts, an evictable free queue.
The scheduler: a queued request starts from its longest cached prefix, never past its last
token; both runners, colocated and PD, produce the tokens they produce without caching.
The bundled target counts preemptions and prefix-cache tokens per timed pass.
"""
import pytest
from support.runner import GREEDY, RUNNER_KW, make_prompts, run

from mrbench.contract import EngineOptions
from mrbench.harness.run.targets import get_target
from mrbench.harness.run.targets.base import SideSpec
from mrbench.runner_impl import LLM, SamplingParams
from mrbench.runner_impl.engine.block_manager import (
    ROOT_HASH,
    BlockAllocator,
    extend_block_hashes,
    hash_block,
)
from mrbench.runner_impl.engine.request import Request
from mrbench.runner_impl.engine.scheduler import Scheduler

BS = 4


# -- the hash chain --------------------------------------------------------------------------

def test_a_block_hash_names_its_whole_prefix():
    a = extend_block_hashes([], [1, 2, 3, 4, 5, 6, 7, 8, 9], BS)
    assert len(a) == 2                                   # the partial third block: none
    assert a[0] == hash_block(ROOT_HASH, [1, 2, 3, 4]) and a[1] == hash_block(a[0], [5, 6, 7, 8])
    # same tokens after a different first block: a different hash
    b = extend_block_hashes([], [9, 9, 9, 9, 5, 6, 7, 8], BS)
    assert b[1] != a[1]
    # extending in place hashes only the blocks not hashed yet, and alike
    grown = extend_block_hashes(list(a[:1]), [1, 2, 3, 4, 5, 6, 7, 8], BS)
    assert grown == a


# -- reference counts and eviction -----------------------------------------------------------

def cached_pool(n: int = 6) -> tuple[BlockAllocator, list[int], list[bytes]]:
    """A pool with one request's two full blocks computed, registered and released."""
    pool = BlockAllocator(n, BS, enable_caching=True)
    blocks = pool.allocate(3)
    hashes = extend_block_hashes([], list(range(10)), BS)
    for b, h in zip(blocks, hashes):
        pool.cache_block(b, h)
    pool.release(blocks)
    return pool, blocks, hashes


def test_a_released_cached_block_stays_hittable_until_handed_out():
    pool, blocks, hashes = cached_pool()
    assert pool.num_free == 6 and pool.longest_cache_hit(hashes, 9) == blocks[:2]
    # the tail was queued before the head: a request's shared prefix is evicted last
    assert list(pool.free)[-3:] == [blocks[2], blocks[1], blocks[0]]
    assert pool.allocate(4) is not None                  # 3 never-used blocks, then the tail
    assert pool.longest_cache_hit(hashes, 9) == blocks[:2]
    assert pool.allocate(1) == [blocks[1]]               # evicts the second block
    assert pool.longest_cache_hit(hashes, 9) == blocks[:1]   # the chain stops there
    assert pool.block_hash[blocks[1]] is None and hashes[1] not in pool.cached


def test_shared_blocks_count_their_holders():
    pool, blocks, hashes = cached_pool()
    hit = pool.longest_cache_hit(hashes, 9)
    assert pool.num_evictable(hit) == 2
    pool.touch(hit)                                      # two requests take the prefix
    pool.touch(hit)
    assert pool.num_free == 4 and pool.num_evictable(hit) == 0
    assert [pool.ref_cnt[b] for b in hit] == [2, 2]
    pool.release(hit)
    assert pool.num_free == 4                            # one holder left
    pool.release(hit)
    assert pool.num_free == 6 and pool.longest_cache_hit(hashes, 9) == hit


def test_a_second_copy_of_a_cached_block_stays_private():
    pool, blocks, hashes = cached_pool()
    other = pool.allocate(1)[0]                          # a never-used block
    pool.cache_block(other, hashes[0])
    assert pool.cached[hashes[0]] == blocks[0] and pool.block_hash[other] is None


def test_without_caching_blocks_return_in_order_and_are_never_hashed():
    pool = BlockAllocator(4, BS)
    got = pool.allocate(3)
    pool.release(got)
    assert list(pool.free) == [3, *got] and not pool.cached


# -- the scheduler: where a queued request starts ------------------------------------------

def admit(sched: Scheduler, tokens: list[int]) -> Request:
    req = Request(str(len(sched.requests)), tokens, SamplingParams(max_tokens=4), seed=0)
    sched.add_request(req)
    sched.schedule()
    return req


def computed_step(sched: Scheduler, req: Request) -> None:
    """The request's scheduled tokens computed (no token sampled): its blocks register."""
    req.num_computed_tokens += req.num_inflight_tokens
    req.num_inflight_tokens = req.num_output_placeholders = 0
    sched._cache_full_blocks(req)


@pytest.mark.parametrize("n_tokens,expect_hit", [(12, 8), (13, 12), (11, 8)])
def test_a_cache_hit_leaves_at_least_the_last_token_to_compute(n_tokens, expect_hit):
    """12 tokens, all 3 blocks cached: the hit stops a block short (vLLM recomputes the
    whole last block rather than start mid-block); 13: 3 blocks and 1 token to compute."""
    sched = Scheduler(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64,
                      allocator=BlockAllocator(16, BS, enable_caching=True))
    first = admit(sched, list(range(3, 16)))            # 13 tokens: 3 full blocks
    computed_step(sched, first)
    second = admit(sched, list(range(3, 3 + n_tokens)))
    assert second.num_computed_tokens == expect_hit
    assert second.block_ids[:expect_hit // BS] == first.block_ids[:expect_hit // BS]
    assert sched.prefix_cache_queries == 13 + n_tokens
    assert sched.prefix_cache_hits == expect_hit


def test_requests_admitted_in_one_step_do_not_share_what_it_computes():
    sched = Scheduler(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64,
                      allocator=BlockAllocator(16, BS, enable_caching=True))
    for _ in range(2):
        sched.add_request(Request(str(len(sched.requests)), list(range(3, 13)),
                                  SamplingParams(max_tokens=4), seed=0))
    out = sched.schedule()
    assert [r.num_computed_tokens for r in out.scheduled_new_reqs] == [0, 0]
    assert sched.prefix_cache_hits == 0


def test_a_hit_that_does_not_fit_takes_nothing():
    """The hit's blocks wait in the free queue: they count against the free blocks."""
    sched = Scheduler(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64,
                      allocator=BlockAllocator(5, BS, enable_caching=True))
    first = admit(sched, list(range(3, 16)))             # 13 tokens: 4 blocks, 3 cached
    computed_step(sched, first)
    sched._free(first)                                   # free: the unused block, then 3..0
    blocker = admit(sched, list(range(40, 45)))          # takes the unused and the partial
    assert len(blocker.block_ids) == 2 and sched.allocator.num_free == 3
    before = (sched.allocator.num_free, list(sched.allocator.free))
    late = Request("late", list(range(3, 16)) + [50, 51, 52, 53, 54], SamplingParams(), seed=0)
    sched.add_request(late)
    sched.schedule()
    assert late.status.value == "waiting" and not late.block_ids
    assert (sched.allocator.num_free, list(sched.allocator.free)) == before


# -- the engine: caching changes no token --------------------------------------------------

@pytest.fixture(scope="module")
def shared_prompts() -> list[list[int]]:
    """Prompts that share a 40-token preamble, then the same prompts again."""
    pre = make_prompts(1, seed=7, lo=40, hi=41)[0]
    once = [pre + p for p in make_prompts(12, seed=3, lo=3, hi=40)]
    return once + once


@pytest.fixture(scope="module")
def uncached(tiny_model_dir, shared_prompts):
    return run(tiny_model_dir, shared_prompts)


@pytest.mark.parametrize("runner", ["v2", "v1"])
@pytest.mark.parametrize("pd", [False, True])
def test_cached_prefixes_change_no_token(tiny_model_dir, shared_prompts, uncached, runner, pd):
    llm = LLM(tiny_model_dir, runner=runner, pd_disagg=pd, enable_prefix_caching=True,
              **RUNNER_KW)
    outs = llm.generate(shared_prompts, GREEDY)
    assert [o.token_ids for o in outs] == uncached
    front = llm.cores[0].scheduler               # the prefill instance of a PD pair
    assert front.prefix_cache_hits > front.prefix_cache_queries / 3


@pytest.mark.parametrize("runner", ["v2", "v1"])
def test_preempted_requests_resume_from_their_own_cached_blocks(tiny_model_dir, prompts64,
                                                               v2_greedy, runner):
    llm = LLM(tiny_model_dir, runner=runner, num_kv_blocks=24, enable_prefix_caching=True,
              **RUNNER_KW)
    assert [o.token_ids for o in llm.generate(prompts64, GREEDY)] == v2_greedy
    assert llm.cores[0].scheduler.num_preemptions > 0


# -- the bundled target's counters -----------------------------------------------------------

def test_the_bundled_target_counts_preemptions_and_prefix_hits_per_pass(tiny_model_dir,
                                                                       shared_prompts):
    s = get_target("bundled").open(
        SideSpec("v2", model=str(tiny_model_dir)),
        EngineOptions(max_num_seqs=4, max_num_batched_tokens=24, num_kv_blocks=16,
                      block_size=8, enable_prefix_caching=True))
    try:
        texts = [s.llm.tokenizer.decode(p) for p in shared_prompts[:12]]
        s.reset_steps()
        s.generate(texts, 24, [])
        got = s.counters()
        sched = s.llm.cores[0].scheduler
        assert got["num_preemptions"] == sched.num_preemptions > 0
        assert got["prefix_cache_queries"] == sched.prefix_cache_queries > 0
        assert got["prefix_cache_hits"] == sched.prefix_cache_hits > 0
        s.reset_steps()                                  # per pass: counted from the reset
        assert {k: s.counters()[k] for k in got if k.startswith(("num_pre", "prefix"))} == \
            dict(num_preemptions=0, prefix_cache_queries=0, prefix_cache_hits=0)
        assert s.resolved()["engine"]["enable_prefix_caching"] is True
    finally:
        s.close()


# -- the two coverage faults: each bites only where its trigger is -------------------------

KV_FAULTS = ("resumed-prefill-len", "prefix-hit-slot-mapping")


@pytest.mark.parametrize("fault", KV_FAULTS)
@pytest.mark.parametrize("pd", [False, True])
def test_kv_faults_change_nothing_without_preemption_or_cache_hits(tiny_model_dir, prompts64,
                                                                   v2_greedy, fault, pd):
    """No preemption and no prefix cache, as in quick (a PD import is a new request whose
    first tokens are computed too): the faulty runner gives the clean tokens."""
    llm = LLM(tiny_model_dir, pd_disagg=pd, faults=[fault], **RUNNER_KW)
    assert [o.token_ids for o in llm.generate(prompts64[:16], GREEDY)] == v2_greedy[:16]
    assert not any(c.scheduler.num_preemptions for c in llm.cores)


def test_resumed_prefill_len_breaks_resumed_requests_only(tiny_model_dir, prompts64,
                                                          v2_greedy):
    llm = LLM(tiny_model_dir, num_kv_blocks=24, faults=["resumed-prefill-len"],
              debug_poison_freed_slots=True, **RUNNER_KW)
    outs = llm.generate(prompts64, GREEDY)
    wrong = {i for i, o in enumerate(outs) if o.token_ids != v2_greedy[i]}
    resumed = {i for i, o in enumerate(outs) if o.metrics.num_preemptions}
    assert wrong and wrong <= resumed


def test_prefix_hit_slot_mapping_breaks_cache_hits(tiny_model_dir, shared_prompts, uncached):
    llm = LLM(tiny_model_dir, enable_prefix_caching=True, faults=["prefix-hit-slot-mapping"],
              **RUNNER_KW)
    outs = [o.token_ids for o in llm.generate(shared_prompts, GREEDY)]
    assert llm.cores[0].scheduler.prefix_cache_hits > 0
    assert sum(a != b for a, b in zip(outs, uncached)) > len(uncached) // 2


# -- the vllm target: the same options by vLLM's names, its counters by ours ----------------

def test_the_kv_cache_options_are_vllms_engine_arguments():
    from mrbench.harness.run.targets.vllm.engine_args import llm_kwargs
    side = SideSpec("v2", device="cuda", target="vllm")
    kw = llm_kwargs(side, EngineOptions(num_kv_blocks=17, block_size=32,
                                        enable_prefix_caching=True), "/m", 512)
    assert (kw["num_gpu_blocks_override"], kw["block_size"], kw["enable_prefix_caching"]) == \
        (17, 32, True)
    plain = llm_kwargs(side, EngineOptions(), "/m", 512)
    assert plain["enable_prefix_caching"] is False
    assert "num_gpu_blocks_override" not in plain and "block_size" not in plain


def test_vllms_kv_counters_are_read_under_the_bundled_names():
    from types import SimpleNamespace

    from mrbench.harness.run.targets.vllm.engine import VllmEngine
    metrics = [SimpleNamespace(name="vllm:num_preemptions", value=3),
               SimpleNamespace(name="vllm:prefix_cache_queries", value=200),
               SimpleNamespace(name="vllm:prefix_cache_hits", value=64),
               SimpleNamespace(name="vllm:spec_decode_num_drafts", value=5)]
    engine = VllmEngine.__new__(VllmEngine)
    engine.llm = SimpleNamespace(get_metrics=lambda: metrics)
    assert engine.counter_totals() == dict(num_preemptions=3.0, prefix_cache_queries=200.0,
                                           prefix_cache_hits=64.0, spec_num_drafts=5.0)
