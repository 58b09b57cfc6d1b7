"""Seeded streams where both sides run one runner and one sampler: 0 divergent streams is
the bar (correctness.exact_streams_check), and a baseline whose streams are degenerate
(most prompts one stream from several seeds) is "not measured", never a pass."""
from mrbench.contract import SideResult
from mrbench.harness.checks.compare import compare
from mrbench.harness.record.suite import Thresholds

TH = Thresholds(latency_metrics=[])


def _side(streams: list[list[int]], temperature: float = 1.0, sampler: str = "s"
          ) -> SideResult:
    """Two samples a prompt, seeds 0.. in order."""
    reqs = [dict(req_index=i, sample_group=i // 2, sampling_seed=i) for i in range(len(streams))]
    return SideResult(requests=reqs, tokens=streams,
                      resolved=dict(target="vllm", runner="v2", sampler=sampler,
                                    sampling_temperature=temperature))


def _agreement(base: SideResult, cand: SideResult):
    return next(c for c in compare("w", base, cand, TH) if c.metric == "token_agreement")


LIVELY = [[i, 10 + i, 20] for i in range(64)]             # every sample its own stream


def test_one_divergent_stream_of_64_is_a_regression():
    cand = [list(s) for s in LIVELY]
    cand[5][2] = 99
    c = _agreement(_side(LIVELY), _side(cand))
    assert c.verdict == "regression" and c.threshold == "0 divergent seeded streams"
    assert c.note.startswith("1 of 64 seeded streams diverge; earliest at output token 2 "
                             "(request 5)")
    assert _agreement(_side(LIVELY), _side(LIVELY)).verdict == "pass"


def test_degenerate_baseline_streams_are_not_measured():
    flat = [[1, 2, 3]] * 8                                  # one stream per prompt
    c = _agreement(_side(flat), _side(flat))
    assert c.verdict == "info" and c.note.startswith("not measured: 4 of 4 prompts gave a "
                                                     "single stream")
    half = [[1, 2, 3]] * 4 + [[i, 2, 3] for i in range(4)]   # 2 of 4 prompts lively
    assert _agreement(_side(half), _side(half)).verdict == "pass"


def test_a_greedy_set_is_one_stream_by_design_and_compared_as_such():
    flat = [[1, 2, 3]] * 8
    assert _agreement(_side(flat, 0.0), _side(flat, 0.0)).verdict == "pass"


def test_different_samplers_keep_the_wilson_share_and_are_not_gated():
    cand = [list(s) for s in LIVELY]
    cand[5][2] = 99
    c = _agreement(_side(LIVELY, sampler="a"), _side(cand, sampler="b"))
    assert c.verdict == "info" and c.threshold.startswith("CI upper")
