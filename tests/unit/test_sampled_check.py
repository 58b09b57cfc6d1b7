"""`sampled_distribution` and the agreement rule for sampled workloads (harness/checks/correctness.py),
on synthetic sides: the test is judged only with enough prompts, passes equal streams,
catches collapsed streams, and token agreement is not gated when samplers differ."""
from mrbench.contract import SideResult
from mrbench.harness.checks.compare import compare
from mrbench.harness.checks.correctness import (
    accuracy_check,
    agreement_check,
    is_sampled,
    min_sampled_prompts,
    sampled_check,
)
from mrbench.harness.record.suite import Thresholds

TH = Thresholds(latency_metrics=[])


def side(streams: list[list[list[int]]], sampler: str = "s") -> SideResult:
    """streams[g] = the token streams of prompt g's samples."""
    res = SideResult(resolved=dict(sampler=sampler))
    for g, group in enumerate(streams):
        for toks in group:
            i = len(res.requests)
            res.requests.append(dict(req_index=i, sample_group=g, correct_strict=False,
                                     fits_context=True))
            res.tokens.append(toks)
    return res


def distinct(n_prompts: int) -> list[list[list[int]]]:
    return [[[g, 1, 2], [g, 3]] for g in range(n_prompts)]


def collapsed(n_prompts: int) -> list[list[list[int]]]:
    return [[[g, 1, 2], [g, 1, 2]] for g in range(n_prompts)]


def test_enough_prompts_for_bonferroni():
    assert min_sampled_prompts(0.05, 3) == 7       # 2 / 2^7 * 3 < 0.05 <= 2 / 2^6 * 3


def test_equal_streams_pass_with_p_one():
    c = sampled_check("s", side(distinct(10)), side(distinct(10)), TH)
    assert c.verdict == "pass" and c.p_value == 1.0


def test_collapsed_streams_are_a_regression():
    c = sampled_check("s", side(distinct(10)), side(collapsed(10)), TH)
    assert c.verdict == "regression" and c.p_value < 0.05
    assert c.unit.startswith("distinct_streams") and c.candidate < c.baseline


def test_a_baseline_without_diverse_streams_is_not_measured():
    c = sampled_check("s", side(collapsed(10)), side(collapsed(10)), TH)
    assert c.verdict == "info" and c.note.startswith("not measured")


def test_too_few_prompts_is_not_measured():
    c = sampled_check("s", side(distinct(5)), side(collapsed(5)), TH)
    assert c.verdict == "info" and "not measured" in c.note


def test_greedy_workloads_have_no_sampled_check():
    greedy = SideResult(requests=[dict(req_index=0)], tokens=[[1, 2]])
    assert sampled_check("g", greedy, greedy, TH) is None


def test_agreement_is_not_gated_when_samplers_differ():
    checks = {c.metric: c for c in compare("s", side(distinct(10), "a"),
                                           side(distinct(10)[::-1], "b"), TH)}
    assert checks["token_agreement"].verdict == "info"
    assert "samplers differ" in checks["token_agreement"].note
    assert checks["sampled_distribution"].verdict == "pass"


def test_agreement_is_gated_when_samplers_match():
    checks = {c.metric: c for c in compare("s", side(distinct(10)), side(collapsed(10)), TH)}
    assert checks["token_agreement"].verdict == "regression"


def test_accuracy_on_random_weights_is_not_measured():
    """A model made by `mrbench model make` answers nothing: its accuracy is reported as
    "not measured", never judged, whatever the two sides scored."""
    def scored(correct: list[bool], random: bool) -> SideResult:
        return SideResult(requests=[dict(req_index=i, correct_strict=c)
                                    for i, c in enumerate(correct)],
                          resolved=dict(random_weights=random))
    th = Thresholds(latency_metrics=[])
    right, wrong = [True] * 40, [False] * 40
    real = accuracy_check("w", scored(right, False), scored(wrong, False), th)
    assert real.verdict.value == "regression"
    rw = accuracy_check("w", scored(right, True), scored(wrong, True), th)
    assert rw.verdict.value == "info" and rw.note.startswith("not measured: random weights")
    assert "on the baseline and the candidate" in rw.note and rw.delta is None


def test_a_side_read_back_from_its_tables_is_greedy_where_its_workload_was():
    """Read back from requests.csv (`compare`), every row has the sampled workload's
    columns, None on a greedy workload: its requests are compared token for token, not
    taken for unseeded samples, and it is not a sampled workload."""
    def greedy(tokens: list[list[int]]) -> SideResult:
        return SideResult(requests=[dict(req_index=i, sample_group=None, sampling_seed=None)
                                    for i in range(len(tokens))], tokens=tokens)
    base, cand = greedy([[1, 2], [3, 4]]), greedy([[1, 2], [3, 5]])
    assert not is_sampled(cand)
    agree = agreement_check("w", base, cand, TH)
    assert agree.candidate == 0.5 and "unseeded" not in agree.note
    sampled = SideResult(requests=[dict(req_index=0, sample_group=0, sampling_seed=None),
                                   dict(req_index=1, sample_group=0, sampling_seed=7)],
                         tokens=[[1], [2]])
    assert is_sampled(sampled)
    assert "1 unseeded requests not compared" in agreement_check("w", sampled, sampled, TH).note
