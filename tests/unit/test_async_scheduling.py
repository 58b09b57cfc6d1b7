"""Async scheduling (V2, `async_scheduling=True`): step n+1 is scheduled and queued before
step n's output is read. It must change when the host learns a token, never which token.
CPU runs cover the scheduler and runner logic; on CUDA the same code overlaps the host
with the device (benchmarks/bench_gpu.py measures that)."""
import pytest
from support.runner import GREEDY, RUNNER_KW, make_prompts, run

from mrbench.runner_impl import LLM, SamplingParams
from mrbench.runner_impl.errors import RunnerError


def test_async_greedy_tokens_equal_sync(tiny_model_dir, prompts64, v2_greedy):
    """64 prompts on 4 slots with a 24-token budget: admissions while a step is in flight,
    chunked prefills, EOS and max_tokens stops."""
    assert run(tiny_model_dir, prompts64, async_scheduling=True) == v2_greedy


def test_async_sampled_stop_strings_and_lengths_equal_sync(tiny_model_dir):
    """Seeded sampling, stop strings and per-request max_tokens: a request that stops on a
    token was scheduled once more; that step's token must be dropped, not appended."""
    prompts = make_prompts(12, seed=3)
    params = [SamplingParams(temperature=0.0 if i % 3 == 0 else 1.0, top_k=0 if i % 2 else 5,
                             max_tokens=1 + (7 * i) % 23, seed=100 + i,
                             stop=["a"] if i % 4 == 1 else []) for i in range(len(prompts))]

    def outs(**kw):
        llm = LLM(tiny_model_dir, **{**RUNNER_KW, **kw})
        return [(o.token_ids, o.outputs[0].text, o.outputs[0].finish_reason)
                for o in llm.generate(prompts, params)]
    sync, asyn = outs(), outs(async_scheduling=True)
    assert asyn == sync
    assert any(r == "stop" for _, _, r in sync) and any(r == "length" for _, _, r in sync)
    for (toks, _, reason), sp in zip(sync, params):
        if reason == "length":
            assert len(toks) == sp.max_tokens


def test_async_preemption_keeps_greedy_outputs(tiny_model_dir, prompts64, v2_greedy):
    """Too few KV blocks: requests are preempted, some while their step is in flight."""
    llm = LLM(tiny_model_dir, num_kv_blocks=24, async_scheduling=True, **RUNNER_KW)
    assert [o.token_ids for o in llm.generate(prompts64, GREEDY)] == v2_greedy
    assert llm.cores[0].scheduler.num_preemptions > 0


def test_async_step_overlaps_the_next_one(tiny_model_dir):
    """After a step, its output is still unread and the request already has its next
    token scheduled; the tokens arrive one step later. A sync engine reads them at once."""
    prompt = make_prompts(1, seed=5)[0]
    sp = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)
    for use_async in (False, True):
        llm = LLM(tiny_model_dir, async_scheduling=use_async, **RUNNER_KW)
        rid = llm.add_request(prompt, sp)
        req = llm.cores[0].scheduler.requests[rid]
        seen, in_flight = [], []
        while llm.has_unfinished():
            llm.step()
            seen.append(len(req.output_token_ids))
            in_flight.append((llm.cores[0].has_in_flight, req.num_output_placeholders))
        prefill_steps = -(-len(prompt) // RUNNER_KW["max_num_batched_tokens"])
        first = prefill_steps + (1 if use_async else 0)     # the step that shows token 1
        assert seen[first - 1] == 1 and seen[first - 2] == 0 and seen[-1] == 5, (use_async, seen)
        # Async: while tokens 1..3 arrive, the step for the next one is already queued.
        assert in_flight[first - 1:first + 2] == ([(True, 1)] * 3 if use_async else [(False, 0)] * 3)
        assert not llm.cores[0].has_in_flight and req.num_output_placeholders == 0


@pytest.mark.parametrize("kw", [dict(runner="v1"), dict(num_speculative_tokens=2),
                                dict(pd_disagg=True)])
def test_async_scheduling_refuses_what_it_does_not_support(tiny_model_dir, kw):
    with pytest.raises(RunnerError, match="async_scheduling"):
        LLM(tiny_model_dir, async_scheduling=True, **{**RUNNER_KW, **kw})
