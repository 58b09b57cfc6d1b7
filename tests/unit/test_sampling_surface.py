"""The sampling surface: min-p, the penalties and the logit bias against a plain reference
computed by hand, vLLM's bounds and order, the V1 and V2 runners drawing the same tokens
for every parameter set of the `sampled` sweep, each set's own fault changing its tokens
and no other set's (the matrix of exclusivity, ten faults by ten sets), the sweep's entries
and parameter hashes, and token agreement leaving unseeded requests out with a count."""
import math

import pytest
import torch
from support.models import tiny_llama
from support.runner import make_prompts

from mrbench.contract import Sampling, SideResult
from mrbench.harness.checks.correctness import agreement_check
from mrbench.harness.record.references import params_hash
from mrbench.harness.record.suite import Thresholds
from mrbench.runner_impl import COVERAGE_FAULTS, FAULTS, LLM, RunnerError, SamplingParams
from mrbench.runner_impl.sampler import (
    BatchParams, LogitBias, Penalties, apply_min_p, process_raw_logits, sample, target_probs)
from mrbench.workloads.sampled import OFF, SETS, WORKLOAD, Params

NEG = float("-inf")


def batch(**kw) -> BatchParams:
    R = 2
    base = dict(temperature=torch.ones(R), top_k=torch.zeros(R, dtype=torch.int64),
                top_p=torch.ones(R), generators=[None] * R, any_random=False,
                any_top_k=False, any_top_p=False)
    return BatchParams(**{**base, **kw})


# ---- the sampler against numbers worked out by hand ---------------------------------------

def test_penalties_match_the_hand_computed_logits():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0, -2.0],
                           [1.0, 1.0, -1.0, 0.0, 4.0]])
    # row 0: prompt {0, 1}, output [3, 3, 2]; row 1: no penalties (neutral values)
    prompt = torch.tensor([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    counts = torch.tensor([[0, 0, 1, 2, 0], [0, 3, 0, 0, 0]])
    pen = Penalties(torch.tensor([2.0, 1.0]), torch.tensor([0.5, 0.0]),
                    torch.tensor([0.25, 0.0]), prompt, counts)
    got = process_raw_logits(logits, batch(penalties=pen))
    # repetition 2 on tokens 0..3 (seen): positive / 2, negative * 2; token 4 unseen.
    # then frequency 0.5 x count, presence 0.25 x (count > 0)
    row0 = [2.0 / 2, -1.0 * 2, 0.5 / 2 - 0.5 * 1 - 0.25, 3.0 / 2 - 0.5 * 2 - 0.25, -2.0]
    assert got[0].tolist() == pytest.approx(row0)
    assert got[1].tolist() == logits[1].tolist()


def test_logit_bias_is_added_before_the_penalties_which_do_not_commute():
    logits = torch.tensor([[-2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    bias = LogitBias(torch.tensor([[0, 2], [1, 0]]), torch.tensor([[3.0, -1.0], [0.5, 0.0]]))
    pen = Penalties(torch.tensor([2.0, 1.0]), torch.zeros(2), torch.zeros(2),
                    torch.tensor([[1, 0, 0], [0, 0, 0]], dtype=torch.bool),
                    torch.zeros(2, 3, dtype=torch.int64))
    got = process_raw_logits(logits, batch(logit_bias=bias, penalties=pen))
    # token 0 (in the prompt): -2 + 3 = 1 > 0, divided by the repetition penalty: 0.5
    # (penalising first would give -2 x 2 + 3 = -1); token 2: unseen, 0 - 1; row 1: the
    # bias on token 1, and its padding (token 0, bias 0) adds nothing
    assert got.tolist() == [[0.5, 0.0, -1.0], [0.0, 0.5, 0.0]]


def test_min_p_applies_to_the_tempered_distribution():
    logits = torch.tensor([[4.0, 2.0, 0.0, -3.0]])
    t = torch.tensor([2.0])
    probs = target_probs(logits, t, torch.zeros(1, dtype=torch.int64), torch.ones(1), False,
                         min_p=torch.tensor([0.3]))
    tempered = (logits / 2).softmax(-1)[0]
    keep = tempered >= 0.3 * tempered.max()            # e^-1 = 0.37 kept, e^-2 = 0.14 not
    assert keep.tolist() == [True, True, False, False]
    ref = torch.where(keep, tempered, 0.0)
    assert probs[0].tolist() == pytest.approx((ref / ref.sum()).tolist())
    # on the raw logits the same min-p keeps only the first token (e^-2 < 0.3)
    assert (logits.softmax(-1)[0] >= 0.3 * logits.softmax(-1)[0].max()).sum() == 1
    assert apply_min_p(logits, torch.tensor([0.0]))[0].tolist() == logits[0].tolist()


@pytest.mark.parametrize("top_k,top_p,kept", [(2, 1.0, [0, 1]), (0, 0.7, [0, 1]),
                                              (0, 0.45, [0]), (3, 0.9, [0, 1, 2])])
def test_top_k_alone_and_top_p_alone(top_k, top_p, kept):
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    probs = target_probs(logits, torch.ones(1), torch.tensor([top_k]), torch.tensor([top_p]),
                         True)[0]
    ref = torch.zeros(4)
    ref[kept] = torch.tensor([0.5, 0.3, 0.15, 0.05])[kept]
    assert probs.tolist() == pytest.approx((ref / ref.sum()).tolist())


def test_a_logit_bias_moves_a_greedy_row_and_unused_parts_run_nothing():
    logits = torch.tensor([[1.0, 2.0, 0.0], [0.0, 0.0, 5.0]])
    bias = LogitBias(torch.tensor([[0], [0]]), torch.tensor([[3.0], [0.0]]))
    assert sample(logits, batch(temperature=torch.zeros(2), logit_bias=bias)).tolist() == [0, 2]
    plain = batch(temperature=torch.zeros(2))
    assert plain.min_p is None and plain.logit_bias is None and plain.penalties is None


# ---- SamplingParams: vLLM's bounds ----------------------------------------------------------

@pytest.mark.parametrize("kw", [dict(min_p=1.5), dict(min_p=-0.1), dict(presence_penalty=2.5),
                                dict(frequency_penalty=-3), dict(repetition_penalty=0),
                                dict(repetition_penalty=math.inf), dict(top_k=-2),
                                dict(logit_bias={-1: 1.0}), dict(logit_bias={3: math.nan})])
def test_out_of_bounds_parameters_are_refused(kw):
    with pytest.raises(RunnerError):
        SamplingParams(**kw)


def test_greedy_drops_the_filters_and_keeps_bias_and_penalties():
    sp = SamplingParams(temperature=0, top_k=5, top_p=0.5, min_p=0.2, logit_bias={4: 1.0},
                        repetition_penalty=1.2)
    assert (sp.top_k, sp.top_p, sp.min_p) == (0, 1.0, 0.0)
    assert sp.processes_raw_logits and sp.uses_penalties
    assert SamplingParams(top_k=-1).top_k == 0


def test_the_engine_refuses_an_out_of_vocabulary_bias_and_penalties_with_drafts(tiny_model_dir):
    llm = LLM(tiny_model_dir, max_num_seqs=2)
    with pytest.raises(RunnerError, match="logit_bias token id"):
        llm.add_request([5, 6, 7], SamplingParams(logit_bias={10 ** 6: 1.0}))
    spec = LLM(tiny_model_dir, max_num_seqs=2, num_speculative_tokens=1)
    with pytest.raises(RunnerError, match="speculative decoding"):
        spec.add_request([5, 6, 7], SamplingParams(frequency_penalty=0.5))


# ---- the runners on every set of the sweep ---------------------------------------------------

def set_params(name: str, i: int, max_tokens: int = 12) -> SamplingParams:
    kw = {**OFF, **SETS[name]}
    every = kw.pop("unseeded_every")
    for shape in ("min_prefill_chunks", "max_num_batched_tokens"):
        kw.pop(shape, None)
    return SamplingParams(**{**kw, "logit_bias": kw["logit_bias"] or None}, max_tokens=max_tokens,
                          seed=None if every and i % every == every - 1 else 100 + i)


def generate(model_dir, name: str, runner: str = "v2", faults=()) -> list[list[int]]:
    """Ten prompts on four slots (every slot reused); `chunked` on a 24-token budget (each
    prompt in >= 3 chunks), the others on a budget no prompt is split under."""
    budget = 24 if name == "chunked" else 1024
    llm = LLM(model_dir, runner=runner, max_num_seqs=4, max_num_batched_tokens=budget,
              block_size=8, max_model_len=256, dtype="float64", faults=list(faults))
    prompts = make_prompts(10, seed=3, lo=50, hi=90)
    return [o.token_ids for o in llm.generate(prompts, [set_params(name, i)
                                                        for i in range(len(prompts))])]


@pytest.fixture(scope="module")
def sweep_model_dir(tmp_path_factory):
    """The tiny random Llama with weights at std 1.0 (the shared one has 0.2): logits spread
    wide enough that every set's fault has streams to break within a few tokens."""
    return tiny_llama(tmp_path_factory.mktemp("tiny_llama_std1"), init_std=1.0)


@pytest.fixture(scope="module")
def clean_v2(sweep_model_dir) -> dict[str, list[list[int]]]:
    return {name: generate(sweep_model_dir, name) for name in SETS}


@pytest.mark.parametrize("name", sorted(SETS))
def test_v1_and_v2_draw_the_same_tokens(sweep_model_dir, clean_v2, name):
    assert generate(sweep_model_dir, name, "v1") == clean_v2[name]


def test_every_set_but_greedy_changes_the_tokens(clean_v2):
    """Each set's parameters take effect: no set decodes as greedy does."""
    assert {n for n in SETS if clean_v2[n] == clean_v2["greedy"]} == {"greedy"}


# Each set's own fault (harness/suites/surface.yaml, docs/coverage.md).
OWN_SET = {"seeded-greedy-sampled": "greedy", "temperature-only-unprocessed": "temperature",
           "fused-top-k-raw-logits": "top-k", "top-p-without-top-k": "top-p",
           "top-p-dropped-with-top-k": "top-k-top-p", "min-p-ignored": "min-p",
           "penalty-slot-reuse": "penalties", "logit-bias-overwrites": "logit-bias",
           "unseeded-batch-drops-seeds": "mixed-seeds", "partial-prefill-noise": "chunked"}


def test_every_set_has_its_own_fault():
    assert sorted(OWN_SET.values()) == sorted(SETS)


@pytest.mark.parametrize("fault", sorted(OWN_SET))
def test_each_sampling_fault_changes_only_its_own_sets_tokens(sweep_model_dir, clean_v2, fault):
    """One row of the matrix: the fault on, every set run, its own set's tokens differ from
    the clean run's and every other set's are the same."""
    changed = {name for name in SETS
               if generate(sweep_model_dir, name, faults=[fault]) != clean_v2[name]}
    assert changed == {OWN_SET[fault]}


def test_the_sampling_faults_are_coverage_faults_with_their_prs():
    prs = {n: COVERAGE_FAULTS[n].vllm_pr for n in OWN_SET}
    assert prs == {"seeded-greedy-sampled": 27077, "temperature-only-unprocessed": 34563,
                   "fused-top-k-raw-logits": 26859, "top-p-without-top-k": 13191,
                   "top-p-dropped-with-top-k": 13191, "min-p-ignored": 13191,
                   "penalty-slot-reuse": 34662, "logit-bias-overwrites": 19041,
                   "unseeded-batch-drops-seeds": 51866, "partial-prefill-noise": 10097}
    assert not set(OWN_SET) & set(FAULTS)
    assert all(str(COVERAGE_FAULTS[n].vllm_pr) in COVERAGE_FAULTS[n].code_path
               for n in OWN_SET)


def test_a_processed_logprobs_engine_never_takes_the_fused_top_k_path(sweep_model_dir):
    """vLLM's fused top-k kernel returns no logits, so an engine that returns processed
    logprobs samples top-k on the fixed path even with the fault on."""
    prompts = make_prompts(4, seed=3, lo=50, hi=90)
    sps = [SamplingParams(temperature=2.0, top_k=20, seed=100 + i, max_tokens=12)
           for i in range(4)]

    def tokens(faults, mode):
        llm = LLM(sweep_model_dir, max_num_seqs=4, dtype="float64", logprobs_mode=mode,
                  faults=faults)
        return [o.token_ids for o in llm.generate(prompts, sps)]
    assert tokens(["fused-top-k-raw-logits"], "processed_logprobs") == \
        tokens([], "processed_logprobs")
    assert tokens(["fused-top-k-raw-logits"], "raw_logprobs") != tokens([], "raw_logprobs")


# ---- the workload's sweep -------------------------------------------------------------------

QUICK = dict(limit=10, samples_per_prompt=2, temperature=2.0, top_k=64, top_p=0.9999,
             max_tokens=32, max_num_seqs=10, wave_size=10, profile_limit=2)


def test_without_sets_the_entry_and_its_reference_hash_are_unchanged():
    p = Params.model_validate(QUICK)
    assert WORKLOAD.points(p) == [("", p)]
    assert sorted(p.model_dump()) == sorted([*QUICK, "seed", "sampling_seed",
                                             "max_num_batched_tokens"])
    assert params_hash(p.model_dump()) == "e442072c47fc6e7e"   # quick's stored reference


def test_sets_expand_into_named_points_with_their_own_sampling():
    p = Params.model_validate({**QUICK, "sets": ["greedy", "min-p", "chunked"]})
    points = dict(WORKLOAD.points(p))
    assert list(points) == ["greedy", "min-p", "chunked"]
    assert points["greedy"].temperature == 0 and points["greedy"].top_k == 0
    assert points["min-p"].min_p == SETS["min-p"]["min_p"] and points["min-p"].top_p == 1.0
    assert WORKLOAD.engine_options(points["chunked"]).max_num_batched_tokens == 40
    assert points["chunked"].min_prefill_chunks == 3
    # adding a set keeps the other points' hashes (their op-count references)
    more = dict(WORKLOAD.points(p.model_copy(update={"sets": ["greedy", "top-k"]})))
    assert params_hash(more["greedy"].model_dump()) == params_hash(points["greedy"].model_dump())


def test_unseeded_rows_get_no_seed_and_a_row_marker():
    p = Params.model_validate({**QUICK, "sets": ["mixed-seeds"]})
    (_, pp), = WORKLOAD.points(p)
    seeds = [WORKLOAD._seed(pp, i) for i in range(4)]
    assert seeds == [0, None, 2, None]
    s = Sampling(2.0, seeds=tuple(seeds), min_p=0.1, logit_bias=((3, 1.0),))
    assert s.window(1, 3).seeds == (None, 2)
    kw = s.engine_kwargs()
    assert kw["logit_bias"] == {3: 1.0} and kw["min_p"] == 0.1 and "seeds" not in kw


def test_token_agreement_skips_unseeded_requests_with_a_count():
    th = Thresholds(latency_metrics=[])

    def side(tokens, seeds):
        return SideResult(requests=[dict(req_index=i, sample_group=i // 2, sampling_seed=s)
                                    for i, s in enumerate(seeds)], tokens=tokens)
    seeds = [0, None, 2, None]
    base = side([[1, 2], [3, 4], [5, 6], [7, 8]], seeds)
    cand = side([[1, 2], [9, 9], [5, 6], [9, 9]], seeds)      # only unseeded rows differ
    check = agreement_check("w", base, cand, th)
    assert check.verdict == "pass" and check.candidate == 1.0
    assert "2 unseeded requests not compared" in check.note
    none_seeded = agreement_check("w", side([[1]], [None]), side([[2]], [None]), th)
    assert none_seeded.verdict == "info" and none_seeded.note.startswith("not measured")
