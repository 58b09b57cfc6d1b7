"""Greedy outputs agree token for token: V2, V1, Hugging Face, spec decode, PD."""
import pytest
import torch
from support.runner import GREEDY, RUNNER_KW, make_prompts, run

from mrbench.runner_impl import LLM, RunnerError, SamplingParams


def hf_greedy(model_dir, prompts, max_new_tokens, eos=2) -> list[list[int]]:
    from transformers import AutoModelForCausalLM
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64)
    outs = []
    for p in prompts:
        g = hf.generate(torch.tensor([p]), max_new_tokens=max_new_tokens, do_sample=False,
                        eos_token_id=eos, pad_token_id=0)[0, len(p):].tolist()
        outs.append(g[:g.index(eos) + 1] if eos in g else g)
    return outs


def test_v2_matches_transformers(tiny_model_dir, prompts64, v2_greedy):
    assert v2_greedy == hf_greedy(tiny_model_dir, prompts64, GREEDY.max_tokens)
    assert len({tuple(o) for o in v2_greedy}) > 32          # outputs are not degenerate


def test_v2_workload_reuses_slots_and_chunks_prefill(tiny_model_dir, prompts64):
    """The parity workload really exercises slot reuse and chunked prefill."""
    llm = LLM(tiny_model_dir, **RUNNER_KW)
    occupants: dict[int, set[str]] = {}
    chunked: set[str] = set()

    def record(core, sched, out):
        for new in sched.scheduled_new_reqs:
            occupants.setdefault(core.runner.state.req_id_to_index[new.req_id], set()).add(new.req_id)
            if sched.num_scheduled_tokens[new.req_id] < new.prefill_len:
                chunked.add(new.req_id)
    llm.add_step_callback(record)
    llm.generate(prompts64, GREEDY)
    assert len(occupants) == RUNNER_KW["max_num_seqs"]
    assert all(len(reqs) > 8 for reqs in occupants.values())
    assert len(chunked) > 16


def test_v1_matches_v2(tiny_model_dir, prompts64, v2_greedy):
    assert run(tiny_model_dir, prompts64, runner="v1") == v2_greedy


@pytest.mark.parametrize("method", ["ngram", "draft"])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_spec_decode_matches_k0(tiny_model_dir, tiny_draft_model_dir, prompts64, v2_greedy,
                                k, method):
    llm = LLM(tiny_model_dir, num_speculative_tokens=k, speculative_method=method,
              draft_model=tiny_draft_model_dir, **RUNNER_KW)
    outs = llm.generate(prompts64, GREEDY)
    assert [o.token_ids for o in outs] == v2_greedy
    assert sum(o.metrics.num_draft_tokens for o in outs) > 0
    assert sum(o.metrics.num_accepted_tokens for o in outs) > 0


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_v1_spec_decode_matches(tiny_model_dir, tiny_draft_model_dir, prompts64, v2_greedy,
                                method):
    assert run(tiny_model_dir, prompts64, runner="v1", num_speculative_tokens=2,
               speculative_method=method, draft_model=tiny_draft_model_dir) == v2_greedy


@pytest.mark.parametrize("runner,k", [("v2", 0), ("v1", 0), ("v2", 2)])
def test_pd_disagg_matches_colocated(tiny_model_dir, prompts64, v2_greedy, runner, k):
    llm = LLM(tiny_model_dir, runner=runner, pd_disagg=True, num_speculative_tokens=k,
              **RUNNER_KW)
    outs = llm.generate(prompts64, GREEDY)
    assert [o.token_ids for o in outs] == v2_greedy
    decode = llm.cores[1]
    assert sum(r.num_new_reqs for r in decode.step_records) > 32   # KV really handed over
    assert all(o.metrics.kv_handoff_s is not None for o in outs if len(o.token_ids) > 1)


@pytest.mark.parametrize("runner", ["v2", "v1"])
def test_pd_under_kv_pressure(tiny_model_dir, prompts64, v2_greedy, runner):
    """Handed-off requests take decode-side blocks only when admitted: no livelock."""
    llm = LLM(tiny_model_dir, runner=runner, pd_disagg=True, num_kv_blocks=24, **RUNNER_KW)
    assert [o.token_ids for o in llm.generate(prompts64, GREEDY)] == v2_greedy
    assert llm.cores[1].scheduler.num_preemptions > 0


def test_prompt_that_can_never_fit_the_kv_cache_is_rejected(tiny_model_dir):
    llm = LLM(tiny_model_dir, num_kv_blocks=4, **{**RUNNER_KW, "block_size": 8})
    with pytest.raises(RunnerError, match="cannot fit in the KV cache"):
        llm.generate([[5] * 40], GREEDY)


def _stuck(llm: LLM) -> str:
    """The error of an engine stepped until it gives up."""
    with pytest.raises(RuntimeError, match="no progress in 100 steps") as e:
        while llm.has_unfinished():
            llm.step()
    return str(e.value)


def test_stuck_engine_raises_instead_of_spinning(tiny_model_dir):
    """With its block pool really empty, the stuck engine says the KV blocks are exhausted
    and what the first waiting request needs."""
    llm = LLM(tiny_model_dir, **RUNNER_KW)
    llm.add_request([5] * 10, GREEDY)
    total = llm.cores[0].allocator.num_blocks
    llm.cores[0].allocator.free.clear()          # no block can ever be granted
    error = _stuck(llm)
    assert "KV blocks exhausted on the colocated instance" in error, error
    assert f"needs 2 blocks, 0 can be taken (1 waiting, 0 running, 0 of {total} KV " \
           "blocks free)" in error, error


def test_a_stuck_engine_with_free_blocks_does_not_blame_the_kv_cache(tiny_model_dir):
    """A scheduler that admits nothing while its blocks are free (here: no slot for any
    request) is stuck for another reason, and says so rather than "KV blocks exhausted"."""
    llm = LLM(tiny_model_dir, **RUNNER_KW)
    llm.add_request([5] * 10, GREEDY)
    llm.cores[0].scheduler.max_num_seqs = 0      # a scheduler that never admits
    total = llm.cores[0].allocator.num_blocks
    error = _stuck(llm)
    assert "KV blocks exhausted" not in error, error
    assert ("no request scheduled on the colocated instance, with KV blocks to spare (1 "
            f"waiting, 0 running, {total} of {total} KV blocks free): not a KV shortage"
            ) in error, error


@pytest.mark.parametrize("runner", ["v2", "v1"])
def test_preemption_keeps_outputs(tiny_model_dir, prompts64, v2_greedy, runner):
    llm = LLM(tiny_model_dir, runner=runner, num_kv_blocks=24, **RUNNER_KW)
    outs = llm.generate(prompts64, GREEDY)
    assert [o.token_ids for o in outs] == v2_greedy
    assert llm.cores[0].scheduler.num_preemptions > 0


@pytest.mark.parametrize("k", [0, 2])
def test_seeded_sampling_is_deterministic_and_batch_invariant(tiny_model_dir, k):
    prompts = make_prompts(12, seed=3)
    sp = SamplingParams(temperature=0.8, top_p=0.9, top_k=20, max_tokens=16, ignore_eos=True)
    a = run(tiny_model_dir, prompts, sp, num_speculative_tokens=k, seed=7)
    assert a == run(tiny_model_dir, prompts, sp, num_speculative_tokens=k, seed=7)
    # Each request's randomness is its own: batch size and runner do not change it.
    assert a == run(tiny_model_dir, prompts, sp, runner="v1", num_speculative_tokens=k, seed=7,
                    max_num_seqs=3)
    assert a != run(tiny_model_dir, prompts, sp, num_speculative_tokens=k, seed=8)
    assert a != run(tiny_model_dir, prompts, GREEDY.__class__(temperature=0, max_tokens=16,
                                                               ignore_eos=True))


def test_stop_conditions(tiny_model_dir):
    llm = LLM(tiny_model_dir, **RUNNER_KW)
    prompt = make_prompts(1, seed=5)[0]
    full = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))[0]
    assert len(full.token_ids) == 20 and full.outputs[0].finish_reason == "length"
    stop_tok = full.token_ids[5]
    cut = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=20, ignore_eos=True,
                                                stop_token_ids=[stop_tok]))[0]
    assert cut.token_ids == full.token_ids[:full.token_ids.index(stop_tok) + 1]
    assert cut.outputs[0].finish_reason == "stop"
    stop_str = full.text[6:8]
    s = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=20, ignore_eos=True,
                                              stop=[stop_str]))[0]
    assert s.text == full.text[:full.text.index(stop_str)]
    assert s.outputs[0].stop_reason == stop_str
    # timestamps: one per token, non-decreasing, after arrival
    assert len(full.token_times) == 20
    assert full.metrics.arrival_time <= full.token_times[0]
    assert all(a <= b for a, b in zip(full.token_times, full.token_times[1:]))


def test_string_prompts_round_trip(tiny_model_dir):
    llm = LLM(tiny_model_dir, **RUNNER_KW)
    outs = llm.generate(["Question: 2+2?\nAnswer:", "hello"], GREEDY)
    assert outs[0].prompt == "Question: 2+2?\nAnswer:"
    assert outs[0].prompt_token_ids == llm.tokenizer.encode("Question: 2+2?\nAnswer:")
    assert outs[1].text == llm.tokenizer.decode(outs[1].token_ids)
