"""Chunked-prefill coverage and the fault that proves it.

The counters (harness/measure/prefill_chunks.py) place each scheduled chunk in its prompt;
the check (coverage.chunk_coverage_check) says whether both sides ran prompts in >= 3 chunks,
"not measured" (never a pass) where one did not; `chunk-slot-mapping` (the class of vLLM PR
36580) maps a middle chunk's KV to the wrong slots. Sides are built by hand except in the
last tests, which run the bundled runners on one prompt in 2 and in 3 chunks."""
import json

import pytest
from pydantic import ValidationError

from mrbench.contract import EngineOptions, SideResult
from mrbench.harness.checks.compare import compare
from mrbench.harness.checks.coverage import chunk_coverage_check
from mrbench.harness.measure.prefill_chunks import MIDDLE, PROMPTS_3PLUS, PrefillChunks
from mrbench.harness.record.references import REF_DIR, params_hash
from mrbench.harness.record.suite import Thresholds, load_suite
from mrbench.harness.run.targets.base import SideSpec, get_target
from mrbench.runner_impl import COVERAGE_FAULTS, FAULTS
from mrbench.workloads.gsm8k import Params
from mrbench.workloads.gsm8k_problems import HELD_OUT_SEEDS, generate
from mrbench.workloads.gsm8k_scoring import PROMPT

ASKED = {"chunked_prefill": {"min_chunks": 3}}


def chunks(*rows, instance="colocated"):
    """Feed (req_id, start, num_tokens, prompt_len) rows; the counters."""
    c = PrefillChunks()
    for rid, start, n, plen in rows:
        c.chunk(instance, rid, start, n, plen)
    return c.counters()


def test_a_prompt_in_three_chunks_has_one_middle_chunk():
    assert chunks(("a", 0, 40, 100), ("a", 40, 40, 100), ("a", 80, 20, 100)) == \
        {MIDDLE: 1.0, PROMPTS_3PLUS: 1.0}


def test_one_or_two_chunks_have_no_middle_chunk():
    assert chunks(("a", 0, 100, 100), ("b", 0, 60, 100), ("b", 60, 40, 100)) == \
        {MIDDLE: 0.0, PROMPTS_3PLUS: 0.0}


def test_decode_rows_and_drafts_are_not_prefill():
    assert chunks(("a", 100, 1, 100), ("a", 101, 3, 100)) == {MIDDLE: 0.0, PROMPTS_3PLUS: 0.0}


def test_interleaved_prompts_and_a_restart_from_zero():
    """Two prompts chunked side by side; one is preempted and recomputed from 0 in two."""
    got = chunks(("a", 0, 30, 100), ("b", 0, 10, 50), ("a", 30, 30, 100), ("b", 10, 20, 50),
                 ("b", 30, 20, 50), ("a", 0, 50, 100), ("a", 50, 50, 100))
    assert got == {MIDDLE: 2.0, PROMPTS_3PLUS: 1.0}      # a's 30..60, b's 10..30; b only


def test_a_reset_keeps_the_chunks_of_an_open_prompt():
    c = PrefillChunks()
    c.chunk("colocated", "a", 0, 40, 100)
    c.reset()
    c.chunk("colocated", "a", 40, 40, 100)
    c.chunk("colocated", "a", 80, 20, 100)
    assert c.counters() == {MIDDLE: 1.0, PROMPTS_3PLUS: 1.0}


def side(prompts=None, middle=None, asked=True) -> SideResult:
    counters = {} if prompts is None else {PROMPTS_3PLUS: float(prompts), MIDDLE: float(middle)}
    return SideResult(counters=counters, resolved=dict(ASKED) if asked else {})


def test_not_asked_no_check():
    assert chunk_coverage_check("w", side(3, 5, asked=False), side(3, 5, asked=False)) is None
    assert not [c for c in compare("w", side(3, 5, False), side(3, 5, False), Thresholds())
                if c.metric == "chunked_prefill_coverage"]


def test_both_sides_with_middle_chunks_pass_with_the_counts():
    c = chunk_coverage_check("w", side(8, 30), side(8, 29))
    assert c.verdict == "pass" and (c.baseline, c.candidate) == (8.0, 8.0)
    assert "middle chunks 30 / 29" in c.note
    got = [x for x in compare("w", side(8, 30), side(8, 29), Thresholds())
           if x.metric == "chunked_prefill_coverage"]
    assert len(got) == 1 and got[0].verdict == "pass"


@pytest.mark.parametrize("b, c, named", [((8, 30), (0, 0), "candidate"),
                                         ((0, 0), (8, 30), "baseline"),
                                         ((0, 0), (0, 0), "baseline and candidate")])
def test_a_side_without_a_three_chunk_prompt_is_not_measured(b, c, named):
    chk = chunk_coverage_check("w", side(*b), side(*c))
    assert chk.verdict == "info" and chk.note.startswith("not measured: ")
    assert f"on the {named} (max_num_batched_tokens" in chk.note


def test_a_side_without_counters_is_not_measured():
    chk = chunk_coverage_check("w", side(), side(8, 30))
    assert chk.verdict == "info" and "not measured: the baseline reported no" in chk.note


def test_min_prefill_chunks_is_3_or_unset_and_keeps_the_stored_references():
    assert Params().min_prefill_chunks is None and Params(min_prefill_chunks=3)
    with pytest.raises(ValidationError):
        Params(min_prefill_chunks=2)
    # the new parameter (default None) must not orphan the references stored before it
    quick = {w.id: w for w in load_suite("quick").workloads}
    seen = 0
    for ref in sorted(REF_DIR.glob("*.json")):          # CPU and CUDA, bundled and vllm
        stored = json.loads(ref.read_text())
        for wid in ("gsm8k", "gsm8k-pd"):
            if wid in stored:
                seen += 1
                assert params_hash(Params(**quick[wid].params).model_dump()) == \
                    stored[wid]["params_hash"], (ref.name, wid)
    assert seen >= 4
    chunked = Params(**quick["gsm8k-chunked"].params)
    assert chunked.min_prefill_chunks == 3
    assert params_hash(chunked.model_dump()) == \
        params_hash(dict(chunked.model_dump(), min_prefill_chunks=None))


def test_chunk_slot_mapping_is_a_coverage_fault_outside_the_default_matrix():
    f = COVERAGE_FAULTS["chunk-slot-mapping"]
    assert f.vllm_pr == 36580 and "chunk-slot-mapping" not in FAULTS
    assert "v2/input_batch.py" in f.code_path


# -- the bundled runners on one prompt (a 167-token GSM8K prompt, one slot) ---------------

@pytest.fixture(scope="module")
def prompt():
    return PROMPT.format(question=generate(HELD_OUT_SEEDS[0], 1)[0].question)


def serve_one(prompt, runner, budget, faults=()):
    """(tokens, chunk counters) of one greedy request on a fresh bundled session."""
    s = get_target("bundled").open(SideSpec(runner, faults=tuple(faults)),
                                   EngineOptions(max_num_seqs=1, max_num_batched_tokens=budget))
    try:
        s.reset_steps()
        out = s.generate([prompt], 16, [])[0]
        assert len(out.prompt_token_ids) == 167       # BOS + 166 characters
        return out.token_ids, {k: v for k, v in s.counters().items() if k in (MIDDLE, PROMPTS_3PLUS)}
    finally:
        s.close()


@pytest.fixture(scope="module")
def reference(prompt):
    toks, got = serve_one(prompt, "v1", 2048)
    assert got == {MIDDLE: 0.0, PROMPTS_3PLUS: 0.0}
    return toks


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_clean_runners_count_the_chunks_they_ran_and_agree(prompt, reference, runner):
    assert serve_one(prompt, runner, 100) == \
        (reference, {MIDDLE: 0.0, PROMPTS_3PLUS: 0.0})              # 100 + 67
    assert serve_one(prompt, runner, 60) == \
        (reference, {MIDDLE: 1.0, PROMPTS_3PLUS: 1.0})              # 60 + 60 + 47
    assert serve_one(prompt, runner, 40) == \
        (reference, {MIDDLE: 3.0, PROMPTS_3PLUS: 1.0})              # 40 x 4 + 7


def test_the_fault_corrupts_a_middle_chunk_only(prompt, reference):
    fault = ["chunk-slot-mapping"]
    assert serve_one(prompt, "v2", 2048, fault)[0] == reference     # one chunk
    assert serve_one(prompt, "v2", 100, fault)[0] == reference      # two: first + last
    toks, got = serve_one(prompt, "v2", 60, fault)                  # three: one middle
    assert got == {MIDDLE: 1.0, PROMPTS_3PLUS: 1.0} and toks != reference
