"""Logprobs on the bundled runner: vLLM's two modes against a hand computation, V1 and V2
agreeing on CPU (float32), the fault's path, and no logprob work where no request asks."""
import math

import numpy as np
import pytest
import torch

from mrbench.runner_impl import LLM, RunnerError, SamplingParams
from mrbench.runner_impl import logprobs as lp_mod
from mrbench.runner_impl.config import EngineConfig
from mrbench.runner_impl.faults import COVERAGE_FAULTS, FAULTS, FaultSet
from mrbench.runner_impl.sampler import BatchParams
from mrbench.workloads.gsm8k_problems import HELD_OUT_SEEDS, generate
from mrbench.workloads.gsm8k_scoring import PROMPT

FAULT = "processed-logprobs-unmasked"
LOGITS = [2.0, 1.0, 0.5, 0.0, -1.0, -3.0]


def log_softmax(xs: list[float]) -> list[float]:
    """By hand: x - log(sum(exp(x))) over the finite entries; -inf stays -inf."""
    lse = math.log(sum(math.exp(x) for x in xs if x != -math.inf))
    return [x - lse if x != -math.inf else -math.inf for x in xs]


def packed(mode: str, sps: list[SamplingParams], tokens: list[int], num: int = 3,
           faults: FaultSet | None = None) -> np.ndarray:
    """`compute` on one row of LOGITS per request, each sampling row with its generator."""
    bp = BatchParams.from_params(sps, [torch.Generator() for _ in sps], [True] * len(sps),
                                 torch.device("cpu"))
    return lp_mod.compute(torch.tensor([LOGITS] * len(sps)), torch.tensor(tokens), num, mode,
                          bp, faults=faults).numpy()


def test_raw_logprobs_are_the_log_softmax_of_the_logits():
    sp = SamplingParams(temperature=0.5, top_k=3)
    row = lp_mod.unpack(packed("raw_logprobs", [sp], [1]), 3)[0]
    want = log_softmax(LOGITS)
    assert row.logprob == pytest.approx(want[1], abs=1e-6)
    assert row.rank == 2                                  # one token more likely
    assert [t for t, _ in row.top] == [0, 1, 2]
    assert [x for _, x in row.top] == pytest.approx(want[:3], abs=1e-6)


def test_processed_logprobs_are_those_of_the_distribution_sampled():
    """Temperature 0.5, then top-k 3: the three kept logits / 0.5, renormalised; the rest
    -inf (vLLM's processed_logprobs)."""
    sp = SamplingParams(temperature=0.5, top_k=3)
    rows = lp_mod.unpack(packed("processed_logprobs", [sp], [2], num=4), 4)
    kept = log_softmax([x / 0.5 for x in LOGITS[:3]])
    r = rows[0]
    assert r.logprob == pytest.approx(kept[2], abs=1e-6)
    assert r.rank == 3
    assert [x for _, x in r.top[:3]] == pytest.approx(kept, abs=1e-6)
    assert r.top[3][1] == -math.inf                        # outside the top-k: masked


def test_top_p_masks_by_the_tempered_mass():
    """Top-p 0.8 at temperature 1: keep tokens until their mass reaches 0.8 (vLLM's rule)."""
    sp = SamplingParams(temperature=1.0, top_p=0.8)
    probs = [math.exp(x) for x in log_softmax(LOGITS)]
    keep = next(i for i in range(len(probs)) if sum(probs[:i + 1]) >= 0.8) + 1
    r = lp_mod.unpack(packed("processed_logprobs", [sp], [0], num=len(LOGITS)),
                      len(LOGITS))[0]
    assert [x for _, x in r.top[:keep]] == pytest.approx(log_softmax(LOGITS[:keep]), abs=1e-6)
    assert all(x == -math.inf for _, x in r.top[keep:])


def test_a_greedy_row_of_a_mixed_batch_gets_its_raw_logprobs():
    """vLLM samples a greedy row at temperature 1, unmasked: processed = raw for it, while
    its batch mate's are tempered and masked."""
    greedy, hot = SamplingParams(temperature=0.0), SamplingParams(temperature=0.5, top_k=2)
    g, h = lp_mod.unpack(packed("processed_logprobs", [greedy, hot], [0, 0]), 3)
    assert g.logprob == pytest.approx(log_softmax(LOGITS)[0], abs=1e-6)
    assert h.logprob == pytest.approx(log_softmax([x / 0.5 for x in LOGITS[:2]])[0], abs=1e-6)


def test_the_fault_takes_processed_logprobs_before_the_masks():
    """The pre-fix path: tempered but unmasked, so normalised over the whole vocabulary."""
    sp = SamplingParams(temperature=0.5, top_k=3)
    good = lp_mod.unpack(packed("processed_logprobs", [sp], [0]), 3)[0]
    bad = lp_mod.unpack(packed("processed_logprobs", [sp], [0], faults=FaultSet([FAULT])),
                        3)[0]
    assert bad.logprob == pytest.approx(log_softmax([x / 0.5 for x in LOGITS])[0], abs=1e-6)
    assert bad.logprob < good.logprob - 1e-3
    assert [t for t, _ in bad.top] == [t for t, _ in good.top]     # the tokens are unchanged
    raw = lp_mod.unpack(packed("raw_logprobs", [sp], [0], faults=FaultSet([FAULT])), 3)[0]
    assert raw.logprob == pytest.approx(log_softmax(LOGITS)[0], abs=1e-6)   # raw: untouched


def test_the_fault_is_a_coverage_fault_outside_the_default_matrix():
    assert FAULT in COVERAGE_FAULTS and FAULT not in FAULTS
    assert COVERAGE_FAULTS[FAULT].vllm_pr == 37144


@pytest.mark.parametrize("bad", [dict(logprobs=-1)])
def test_bad_requests_are_refused(bad):
    with pytest.raises(RunnerError):
        SamplingParams(**bad)


def test_an_unknown_mode_is_refused():
    with pytest.raises(RunnerError, match="logprobs_mode"):
        EngineConfig(logprobs_mode="raw_logits")


# ---- the runners, end to end on the bundled model (float32 on CPU) ------------------------

PROMPTS = [PROMPT.format(question=q.question) for q in generate(HELD_OUT_SEEDS[3], 6)]
# 4 slots for 6 prompts (slot reuse) and a 96-token step budget (prompts in 2-3 chunks)
SHAPE = dict(max_num_seqs=4, max_num_batched_tokens=96, warmup=False)


def requests(mode: str) -> list[SamplingParams]:
    """Raw: greedy. Processed: seeded T 2 with top-k 8 or top-p 0.9, a greedy request
    and one that asks for no logprobs, in one batch."""
    if mode == "raw_logprobs":
        return [SamplingParams(temperature=0.0, max_tokens=16, logprobs=5)] * len(PROMPTS)
    sps = [SamplingParams(temperature=2.0, top_k=8, seed=i, max_tokens=16, logprobs=5)
           for i in range(len(PROMPTS))]
    sps[1] = SamplingParams(temperature=2.0, top_p=0.9, seed=1, max_tokens=16, logprobs=3)
    sps[2] = SamplingParams(temperature=0.0, max_tokens=16, logprobs=5)
    sps[3] = SamplingParams(temperature=2.0, top_k=8, seed=3, max_tokens=16)
    return sps


def generate_both(mode: str, **kw):
    sps = requests(mode)
    return [LLM(runner=r, logprobs_mode=mode, **{**SHAPE, **kw}).generate(PROMPTS, sps)
            for r in ("v1", "v2")], sps


def assert_agree(v1, v2, sps, tol=1e-5):
    compared = 0
    for a, b, sp in zip(v1, v2, sps):
        assert a.token_ids == b.token_ids
        la, lb = a.outputs[0].logprobs, b.outputs[0].logprobs
        if sp.logprobs is None:
            assert la is None and lb is None
            continue
        assert len(la) == len(lb) == len(a.token_ids)
        for x, y in zip(la, lb):
            assert abs(x.logprob - y.logprob) <= tol and x.rank == y.rank
            assert len(x.top) == len(y.top) == sp.logprobs
            assert [t for t, _ in x.top] == [t for t, _ in y.top]
            compared += 1
    assert compared > 50


@pytest.mark.parametrize("mode", ["raw_logprobs", "processed_logprobs"])
def test_v1_and_v2_agree_on_cpu_float32(mode):
    (v1, v2), sps = generate_both(mode)
    assert_agree(v1, v2, sps)
    if mode == "processed_logprobs":     # the masks show: top-k 8 leaves -inf past the 8th
        lps = v2[0].outputs[0].logprobs[0]
        assert all(math.isfinite(x) for _, x in lps.top)


def test_v1_and_v2_agree_with_drafts_and_with_async_scheduling():
    """Drafts: several tokens (and logits rows) per step; async: the copy is waited for
    one step later."""
    (v1, v2), sps = generate_both("raw_logprobs", num_speculative_tokens=2)
    assert_agree(v1, v2, sps)
    sps = requests("processed_logprobs")
    v1 = LLM(runner="v1", logprobs_mode="processed_logprobs", **SHAPE).generate(PROMPTS, sps)
    v2 = LLM(runner="v2", logprobs_mode="processed_logprobs", async_scheduling=True,
             **SHAPE).generate(PROMPTS, sps)
    assert_agree(v1, v2, sps)


def test_the_fault_moves_the_logprobs_and_not_the_tokens():
    sps = requests("processed_logprobs")
    v1 = LLM(runner="v1", logprobs_mode="processed_logprobs", **SHAPE).generate(PROMPTS, sps)
    bad = LLM(runner="v2", logprobs_mode="processed_logprobs", faults=[FAULT],
              **SHAPE).generate(PROMPTS, sps)
    assert [o.token_ids for o in v1] == [o.token_ids for o in bad]
    moved = [abs(x.logprob - y.logprob) > 1e-4
             for a, b in zip(v1, bad) if a.outputs[0].logprobs
             for x, y in zip(a.outputs[0].logprobs, b.outputs[0].logprobs)]
    assert sum(moved) > len(moved) / 2


def test_a_batch_without_logprobs_does_no_logprob_work(monkeypatch):
    """A request that asks for none costs nothing: neither runner computes logprobs, and
    the output has none."""
    def refuse(*a, **k):
        raise AssertionError("logprob work in a batch that asked for none")
    from mrbench.runner_impl.v1 import model_runner as v1_mod
    from mrbench.runner_impl.v2 import model_runner as v2_mod
    monkeypatch.setattr(v1_mod, "compute", refuse)
    monkeypatch.setattr(v2_mod, "compute", refuse)
    for runner in ("v1", "v2"):
        for mode in ("raw_logprobs", "processed_logprobs"):
            outs = LLM(runner=runner, logprobs_mode=mode, **SHAPE).generate(
                PROMPTS[:3], SamplingParams(temperature=0.0, max_tokens=4))
            assert all(o.outputs[0].logprobs is None for o in outs)


def test_too_many_logprobs_are_refused():
    llm = LLM(runner="v1", warmup=False)
    with pytest.raises(RunnerError, match="vocabulary"):
        llm.generate(PROMPTS[:1], SamplingParams(max_tokens=2, logprobs=10_000))
