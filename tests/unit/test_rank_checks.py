"""Tensor parallel: the count checks judge every rank (`syncs_per_step[rank1]`), one rank's
extra sync or op is a regression there alone, a rank that counted nothing is "not measured",
never a pass, and a stored reference (one runner's counts) is not held against a rank."""
from mrbench.contract import SideResult
from mrbench.harness.checks.compare import compare
from mrbench.harness.checks.counts import on_rank, ranks_of
from mrbench.harness.measure import phases
from mrbench.harness.record.suite import Thresholds

TH = Thresholds(latency_metrics=[], syncs_budget=0.0)


def _rows(rank, steps=3, syncs_prepare=0, ops_sample=4):
    ran = {f"ran_{p}": 1 for p in phases.PHASES} | {f"syncs_{p}": 0 for p in phases.PHASES}
    return [dict(ran, rank=rank, syncs_prepare=syncs_prepare, syncs_hot=syncs_prepare,
                 ops=10 + ops_sample, ops_forward=10, ops_sample=ops_sample, allocs=2)
            for _ in range(steps)]


def _side(*rank_rows, runner="v2"):
    return SideResult(profile=[r for rows in rank_rows for r in rows],
                      resolved=dict(target="vllm", runner=runner))


def _verdicts(checks):
    return {c.metric: c.verdict for c in checks
            if c.metric.split("[")[0] in ("syncs_per_step", "ops_vs_baseline",
                                          "ops_per_step", "ops_vs_reference")}


def test_every_rank_is_judged_and_one_ranks_regression_is_its_own():
    base = _side(_rows(0), _rows(1))
    assert ranks_of(base) == [0, 1] and len(on_rank(base, 1).profile) == 3
    clean = _verdicts(compare("w", base, _side(_rows(0), _rows(1)), TH))
    assert clean == {"syncs_per_step[rank0]": "pass", "syncs_per_step[rank1]": "pass",
                     "ops_per_step[rank0]": "info", "ops_per_step[rank1]": "info",
                     "ops_vs_baseline[rank0]": "pass", "ops_vs_baseline[rank1]": "pass"}
    # rank 1 alone syncs once a step in prepare and runs one more op in its sampler
    bad = _verdicts(compare("w", base, _side(_rows(0), _rows(1, syncs_prepare=1,
                                                              ops_sample=5)), TH))
    assert bad["syncs_per_step[rank1]"] == bad["ops_vs_baseline[rank1]"] == "regression"
    assert bad["syncs_per_step[rank0]"] == bad["ops_vs_baseline[rank0]"] == "pass"


def test_a_rank_that_counted_nothing_is_not_measured():
    checks = {c.metric: c for c in compare("w", _side(_rows(0), _rows(1)), _side(_rows(0)),
                                            TH)}
    lost = checks["syncs_per_step[rank1]"]
    assert lost.verdict == "error" and lost.note == ("not measured: no profiled step on "
                                                     "the candidate")
    assert checks["syncs_per_step[rank0]"].verdict == "pass"


def test_one_runner_keeps_its_plain_names_and_its_reference():
    def one():
        return _side([{k: v for k, v in r.items() if k != "rank"} for r in _rows(0)])
    assert {"syncs_per_step", "ops_vs_baseline", "ops_vs_reference"} <= \
        {c.metric for c in compare("w", one(), one(), TH)}
    ranked = {c.metric for c in compare("w", _side(_rows(0), _rows(1)),
                                        _side(_rows(0), _rows(1)), TH)}
    assert not any(m.startswith("ops_vs_reference") for m in ranked)


def test_a_side_in_one_process_is_held_against_every_rank_of_the_other():
    """vLLM at tensor_parallel_size 2 against the bundled runner (or vLLM at 1): the
    one-process side has no rank rows; each rank is judged against the whole of it, not
    "not measured" for a rank it never had."""
    def one(**kw):
        return _side([{k: v for k, v in r.items() if k != "rank"} for r in _rows(0, **kw)])
    checks = _verdicts(compare("w", one(), _side(_rows(0), _rows(1)), TH))
    assert checks["syncs_per_step[rank0]"] == checks["syncs_per_step[rank1]"] == "pass"
    assert checks["ops_per_step[rank0]"] == checks["ops_per_step[rank1]"] == "info"
    bad = _verdicts(compare("w", one(), _side(_rows(0), _rows(1, syncs_prepare=1)), TH))
    assert bad["syncs_per_step[rank1]"] == "regression"
    assert bad["syncs_per_step[rank0]"] == "pass"
