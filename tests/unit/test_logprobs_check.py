"""`logprobs_agreement`: per compared position, the generated token's logprob within the
dtype's tolerance and the top-N set equal but for near ties; "not measured" when nothing
was compared. Also the workload's rows and the vLLM target's conversion of vLLM's Logprob
dicts, which feed it."""
import json
import math
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from mrbench.contract import EngineOptions, SideResult, TokenLogprob
from mrbench.harness.checks.compare import compare
from mrbench.harness.checks.logprobs import LOGPROB_TOLERANCE, logprobs_check
from mrbench.harness.record.run_record import Verdict
from mrbench.harness.record.suite import Thresholds
from mrbench.harness.run.targets.base import SideSpec
from mrbench.harness.run.targets.vllm.engine_args import llm_kwargs
from mrbench.harness.run.targets.vllm.engine_args import check_owned
from mrbench.harness.run.targets.vllm.engine import token_logprobs
from mrbench.workloads.logprobs import WORKLOAD as LOGPROBS
from mrbench.workloads.logprobs import Params, encode

TOP = [[7, -0.1], [3, -2.5], [9, -3.0], [4, -4.0], [5, -5.0], [6, -6.0]]    # N + 1 = 6


def side(entries_per_request, tokens, dtype="float32", top_n=5, target="bundled"):
    rows = [dict(req_index=i, logprobs_top_n=top_n,
                 logprobs=None if e is None else json.dumps(e))
            for i, e in enumerate(entries_per_request)]
    return SideResult(requests=rows, tokens=tokens,
                      resolved=dict(dtype=dtype, target=target, runner="v2"))


def entries(n_tokens, logprob=-0.1, top=TOP):
    return [[logprob, top] for _ in range(n_tokens)]


def check(base, cand):
    return logprobs_check("logprobs.raw", base, cand)


def test_equal_logprobs_pass_with_the_counts():
    b = side([entries(3), entries(2)], [[7, 7, 7], [7, 7]])
    c = check(b, side([entries(3), entries(2)], [[7, 7, 7], [7, 7]]))
    assert c.verdict == Verdict.PASS and c.candidate == 0
    assert "5 positions compared" in c.note and "max |delta logprob| 0" in c.note
    assert "1e-04" in c.threshold or "0.0001" in c.threshold


def test_a_logprob_beyond_the_tolerance_is_a_regression():
    tol = LOGPROB_TOLERANCE["float32"]
    b = side([entries(3)], [[7, 7, 7]])
    cand = entries(3)
    cand[1] = [-0.1 - 3 * tol, TOP]
    c = check(b, side([cand], [[7, 7, 7]]))
    assert c.verdict == Verdict.REGRESSION and c.candidate == 1
    assert "1 logprob" in c.note and "request 0, output token 1" in c.note
    cand[1] = [-0.1 - tol / 2, TOP]                    # within: rounding
    assert check(b, side([cand], [[7, 7, 7]])).verdict == Verdict.PASS


def test_the_tolerance_is_the_looser_sides_dtype():
    b = side([entries(1)], [[7]], dtype="bfloat16")
    c = check(b, side([[[-0.15, TOP]]], [[7]], dtype="float32"))
    assert c.verdict == Verdict.PASS and "bfloat16" in c.threshold
    c = check(side([entries(1)], [[7]]), side([[[-0.15, TOP]]], [[7]]))
    assert c.verdict == Verdict.REGRESSION


def test_a_different_top_n_set_is_a_regression_unless_a_near_tie():
    other = [[7, -0.1], [3, -2.5], [9, -3.0], [4, -4.0], [8, -4.9], [5, -5.0]]
    c = check(side([entries(1)], [[7]]), side([[[-0.1, other]]], [[7]]))
    assert c.verdict == Verdict.REGRESSION and "1 top-N set" in c.note
    # the 5th and 6th a near tie on a side: rounding may order them either way
    tie_b = [[7, -0.1], [3, -2.5], [9, -3.0], [4, -4.0], [5, -5.0], [8, -5.00001]]
    tie_c = [[7, -0.1], [3, -2.5], [9, -3.0], [4, -4.0], [8, -5.0], [5, -5.00001]]
    c = check(side([[[-0.1, tie_b]]], [[7]]), side([[[-0.1, tie_c]]], [[7]]))
    assert c.verdict == Verdict.PASS and "near ties allowed 1" in c.note


def test_masked_tokens_tie_at_minus_inf_in_no_order():
    """Processed logprobs past the top-k are -inf: their order in the top-N is arbitrary."""
    inf = -math.inf
    b = [[7, -0.1], [3, -2.5], [9, inf], [4, inf], [5, inf], [6, inf]]
    c = [[7, -0.1], [3, -2.5], [6, inf], [5, inf], [4, inf], [9, inf]]
    got = check(side([[[-0.1, b]]], [[7]]), side([[[-0.1, c]]], [[7]]))
    assert got.verdict == Verdict.PASS


def test_positions_after_the_tokens_diverge_are_not_compared():
    """Sampled streams of different samplers diverge: the position where they differ is
    compared by its top-N set only (the same context), and none after it."""
    b = side([entries(4)], [[7, 7, 1, 2]])
    cand = entries(4)
    cand[3] = [-9.0, TOP]                              # after the divergence: not compared
    c = check(b, side([cand], [[7, 7, 3, 2]]))
    assert c.verdict == Verdict.PASS
    assert "3 positions compared (2 with the same generated token)" in c.note


@pytest.mark.parametrize("why, base_entries, cand_entries, top_n", [
    ("no request asked for logprobs", [entries(2)], [entries(2)], None),
    ("the candidate returned no logprobs", [entries(2)], [None], 5),
    ("the baseline and candidate returned no logprobs", [None], [None], 5),
])
def test_nothing_compared_is_not_measured(why, base_entries, cand_entries, top_n):
    c = check(side(base_entries, [[7, 7]], top_n=top_n),
              side(cand_entries, [[7, 7]], top_n=top_n))
    assert c.verdict == Verdict.INFO and c.note == f"not measured: {why}"


def test_no_position_with_a_common_context_is_not_measured():
    c = check(side([[]], [[]]), side([[]], [[]]))
    assert c.verdict == Verdict.INFO and c.note.startswith("not measured: no output position")


def test_a_workload_that_asked_nothing_has_no_check():
    plain = SideResult(requests=[dict(req_index=0)], tokens=[[1]])
    assert logprobs_check("gsm8k", plain, plain) is None


def test_compare_runs_it_and_does_not_gate_it_across_engines():
    b = side([entries(1)], [[7]])
    c = side([[[-5.0, TOP]]], [[7]])
    th = Thresholds(latency_metrics=[])
    got = {x.metric: x for x in compare("logprobs.raw", b, c, th)}
    assert got["logprobs_agreement"].verdict == Verdict.REGRESSION
    c = side([[[-5.0, TOP]]], [[7]], target="vllm")
    got = {x.metric: x for x in compare("logprobs.raw", b, c, th)}
    assert got["logprobs_agreement"].verdict == Verdict.INFO
    assert "cross-engine" in got["logprobs_agreement"].note


# ---- what feeds it: the workload's rows, the vLLM target's conversion ---------------------

def test_the_workload_has_one_entry_per_mode_with_its_engine_option():
    points = LOGPROBS.points(Params())
    assert [tag for tag, _ in points] == ["raw", "processed"]
    assert [LOGPROBS.engine_options(p).logprobs_mode for _, p in points] == [
        "raw_logprobs", "processed_logprobs"]


def test_a_top_k_that_masks_the_top_n_is_refused():
    with pytest.raises(ValidationError, match="top_k"):
        Params(top_n=5, top_k=5)
    Params(top_n=5, top_k=0)                        # off: fine


def test_rows_carry_rounded_logprobs_and_no_vocabulary():
    row = json.loads(encode([TokenLogprob(-0.123456789, 1, [(7, -0.123456789), (3, -2.5)])]))
    assert row == [[-0.123457, [[7, -0.123457], [3, -2.5]]]]
    assert encode(None) is None
    inf = json.loads(encode([TokenLogprob(-1.0, 1, [(7, -1.0), (3, -math.inf)])]))
    assert inf[0][1][1][1] == -math.inf


def test_vllms_logprob_dicts_become_token_logprobs():
    """vLLM's position dict holds the generated token (its rank in the vocabulary) and the
    top-N (ranks 1..N); where the generated token is among them, one entry."""
    def L(lp: float, rank: int) -> SimpleNamespace:
        return SimpleNamespace(logprob=lp, rank=rank)
    positions = [{5: L(-0.1, 1), 9: L(-2.0, 2)},                  # generated = top-1
                 {4: L(-6.0, 7), 1: L(-0.2, 1), 2: L(-1.9, 2)}]   # generated outside
    got = token_logprobs([5, 4], positions, 2)
    assert got[0] == TokenLogprob(-0.1, 1, [(5, -0.1), (9, -2.0)])
    assert got[1] == TokenLogprob(-6.0, 7, [(1, -0.2), (2, -1.9)])
    assert token_logprobs([5], None, 2) is None


def test_the_vllm_engine_gets_the_mode_and_owns_it():
    kw = llm_kwargs(SideSpec("v1", target="vllm"),
                    EngineOptions(logprobs_mode="processed_logprobs"), "/m", 64)
    assert kw["logprobs_mode"] == "processed_logprobs"
    assert llm_kwargs(SideSpec("v1", target="vllm"), EngineOptions(), "/m", 64)[
        "logprobs_mode"] == "raw_logprobs"
    from mrbench.contract import BadInput
    with pytest.raises(BadInput, match="logprobs workload"):
        check_owned({"logprobs_mode": "processed_logprobs"})
