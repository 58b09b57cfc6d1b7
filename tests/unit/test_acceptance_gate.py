"""The acceptance-length gate (spec.spec_check) and the fault that proves it.

The gate: a candidate whose mean acceptance length (AL) falls by more than
`acceptance_drop`, significantly at alpha (paired per request: one-sided Wilcoxon
signed-rank, Hodges-Lehmann estimate), is a regression; where no test can reach alpha it
reports, never passes. Sides are built by hand here; no engine runs except in the last
tests, which run the bundled V2 runner with and without `strict-acceptance`."""
import math
import warnings

import numpy as np
import pytest

from mrbench.contract import SideResult
from mrbench.harness.checks import stats
from mrbench.harness.checks.compare import compare
from mrbench.harness.checks.spec import per_request_al, spec_check
from mrbench.harness.record.suite import Thresholds
from mrbench.runner_impl import COVERAGE_FAULTS, FAULTS, LLM, SamplingParams
from mrbench.runner_impl.default_model import default_model_dir

TH = Thresholds()


def side(counts, target="bundled") -> SideResult:
    """One request per (drafts, accepted) pair, in req_index order."""
    rows = [dict(req_index=i, output_tokens=10, num_drafts=d, num_draft_tokens=2 * d,
                 num_accepted_tokens=a) for i, (d, a) in enumerate(counts)]
    return SideResult(requests=rows, resolved=dict(target=target))


def base_counts(n=24, seed=0):
    rng = np.random.default_rng(seed)
    drafts = rng.integers(20, 60, n)
    return [(int(d), int(rng.integers(d // 2, 2 * d))) for d in drafts]   # AL 1.5 .. 3


def cut(counts, frac):
    """Every request loses `frac` of its accepted drafts (and so of its AL - 1)."""
    return [(d, int(round(a * (1 - frac)))) for d, a in counts]


@pytest.mark.parametrize("alpha, n", [(0.05, 5), (0.0625, 5), (0.01, 7), (0.5, 2)])
def test_min_pairs_signed_rank_is_where_the_exact_test_can_reach_alpha(alpha, n):
    assert stats.min_pairs_signed_rank(alpha) == n
    assert 0.5 ** n < alpha <= 0.5 ** (n - 1)
    assert stats.wilcoxon_signed_rank([-1.0] * n, alternative="less").p_value < alpha
    assert stats.wilcoxon_signed_rank([-1.0] * (n - 1), alternative="less").p_value >= alpha


def test_identical_acceptance_passes_without_warnings():
    """Bundled greedy V1 and V2 verify the same drafts: all-zero differences."""
    b = base_counts()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = spec_check("spec", side(b), side(b), TH)
    assert c.verdict == "pass" and c.p_value == 1.0, c
    assert c.delta == 0.0 and c.ci == [0.0, 0.0] and c.baseline == c.candidate
    assert "0 / 0 of 24" in c.note and "one-sided" in c.method


def test_a_cut_in_acceptance_is_a_regression():
    b = base_counts()
    c = spec_check("spec", side(b), side(cut(b, 0.4)), TH)
    assert c.verdict == "regression", c
    assert c.p_value < 1e-4 and c.delta < -TH.acceptance_drop and c.ci[1] < 0
    assert c.candidate < c.baseline and "24 / 0 of 24" in c.note
    assert c.threshold == "-5% and p < 0.05"


def test_a_significant_drop_below_the_threshold_passes():
    b = base_counts()
    c = spec_check("spec", side(b), side(cut(b, 0.03)), TH)
    assert c.p_value < TH.alpha and -TH.acceptance_drop < c.delta < 0
    assert c.verdict == "pass", c


def test_a_drop_in_a_few_requests_is_not_significant():
    b = base_counts()
    c_counts = cut(b[:3], 0.9) + b[3:]
    c = spec_check("spec", side(b), side(c_counts), TH)
    assert c.p_value > TH.alpha and c.verdict == "pass", c


def test_a_higher_candidate_acceptance_passes():
    b = base_counts()
    c = spec_check("spec", side(cut(b, 0.4)), side(b), TH)
    assert c.verdict == "pass" and c.delta > 0 and c.p_value > 0.5


def test_too_few_paired_requests_report_not_pass():
    b = base_counts(4)
    c = spec_check("spec", side(b), side(cut(b, 0.9)), TH)
    assert c.verdict == "info" and c.p_value is None
    assert "4 requests drafted on both sides" in c.note and ">= 5" in c.note
    # requests with no drafts on a side are not pairs
    b = base_counts(8)
    c_counts = [(0, 0)] * 4 + cut(b[4:], 0.9)
    c = spec_check("spec", side(b), side(c_counts), TH)
    assert c.verdict == "info" and "4 requests drafted" in c.note


def test_a_baseline_without_spec_decoding_reports():
    b = SideResult(requests=[dict(req_index=i, output_tokens=10) for i in range(24)])
    c = spec_check("spec", b, side(base_counts()), TH)
    assert c.verdict == "info" and c.baseline is None and "does not speculate" in c.note
    zero = side([(0, 0)] * 24)
    c = spec_check("spec", zero, side(base_counts()), TH)
    assert c.verdict == "info" and "baseline made no drafts" in c.note


def test_zero_drafts_are_not_measured_never_a_pass():
    zero = side([(0, 0)] * 24)
    c = spec_check("spec", side(base_counts()), zero, TH)
    assert c.verdict == "error" and c.note.startswith("not measured:"), c
    c = spec_check("spec", zero, zero, TH)
    assert c.verdict == "info" and c.note.startswith("not measured:")
    plain = SideResult(requests=[dict(req_index=0, output_tokens=3)])
    assert spec_check("spec", plain, plain, TH) is None          # no spec decode: no check


def test_engine_wide_counters_only_are_reported():
    """vLLM's counters give one AL per side, no per-request pairs."""
    def counters(drafts, acc):
        return SideResult(counters=dict(spec_num_drafts=drafts, spec_num_draft_tokens=2 * drafts,
                                        spec_num_accepted_tokens=acc), resolved=dict(target="vllm"))
    c = spec_check("spec", counters(1000, 1000), counters(1000, 600), TH)
    assert c.verdict == "info" and "engine-wide counters only" in c.note
    assert c.baseline == 2.0 and c.candidate == 1.6 and math.isclose(c.delta, -0.2)


def test_cross_engine_acceptance_is_not_gated():
    b = base_counts()
    base, cand = side(b), side(cut(b, 0.4), target="vllm")
    checks = {c.metric: c for c in compare("spec", base, cand, TH.model_copy(
        update=dict(latency_metrics=[])))}
    c = checks["mean_acceptance_length"]
    assert c.verdict == "info" and c.note.startswith("cross-engine acceptance"), c
    same = {c.metric: c for c in compare("spec", side(b), side(cut(b, 0.4)), TH.model_copy(
        update=dict(latency_metrics=[])))}
    assert same["mean_acceptance_length"].verdict == "regression"


def test_per_request_al_reads_stored_rows():
    """Rows read back from requests.csv (`mrbench compare`) carry floats and None."""
    s = SideResult(requests=[dict(req_index=0.0, num_drafts=4.0, num_accepted_tokens=2.0),
                             dict(req_index=1.0, num_drafts=0.0, num_accepted_tokens=0.0),
                             dict(req_index=2.0, num_drafts=None, num_accepted_tokens=None)])
    assert per_request_al(s) == {0: 1.5}


# ---- the fault: the bundled V2 runner rejects drafts a correct sampler accepts ----------

PROMPTS = ["Question: Tom has 3 apples and buys 5 more apples. How many apples?\nAnswer:",
           "Question: A shop sells 12 pens a day for 7 days. How many pens in all?\nAnswer:",
           "Question: Ann reads 4 pages a day. How many pages in 9 days?\nAnswer:",
           "Question: 6 boxes hold 8 eggs each. How many eggs?\nAnswer:"]


def generate(faults=(), runner="v2", temperature=0.0):
    llm = LLM(default_model_dir(), runner=runner, num_speculative_tokens=2, max_num_seqs=4,
              faults=list(faults))
    outs = llm.generate(PROMPTS, SamplingParams(temperature=temperature, max_tokens=48, seed=7))
    return ([o.token_ids for o in outs],
            [(o.metrics.num_drafts, o.metrics.num_accepted_tokens) for o in outs])


def test_strict_acceptance_is_a_coverage_fault_outside_the_default_matrix():
    f = COVERAGE_FAULTS["strict-acceptance"]
    assert f.vllm_pr == 40651 and f.bug_class == "acceptance cut with no accuracy change"
    assert "strict-acceptance" not in FAULTS


def test_strict_acceptance_keeps_greedy_tokens_and_cuts_acceptance():
    clean_toks, clean = generate()
    v1_toks, v1 = generate(runner="v1")
    toks, faulty = generate(["strict-acceptance"])
    assert toks == clean_toks == v1_toks                     # lossless: the same tokens
    assert clean == v1                                       # and V2 drafts as V1 does
    acc_clean = sum(a for _, a in clean) / sum(d for d, _ in clean)
    acc_fault = sum(a for _, a in faulty) / sum(d for d, _ in faulty)
    assert acc_clean > 0.3 and acc_fault < 0.9 * acc_clean, (clean, faulty)
    # never more than k - 1 = 1 accepted draft per verification step
    assert all(a <= d for d, a in faulty)


def test_strict_acceptance_runs_on_random_rows():
    toks, faulty = generate(["strict-acceptance"], temperature=0.8)
    assert all(toks) and all(a <= d for d, a in faulty)
