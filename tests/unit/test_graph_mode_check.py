"""`cudagraph_mode`: both vLLM sides must read back the CUDA-graph mode their engine
arguments resolve to. The figures are those of real runs (an H200, vLLM 0.26.0): clean, V2
and V1 resolve one mode; with vLLM PR 32936 put back, V2 under FlashInfer and spec decode
kept FULL_AND_PIECEWISE where V1 fell back to PIECEWISE."""
from mrbench.contract import SideResult
from mrbench.harness.checks.graphs import graph_mode_check
from mrbench.harness.record.run_record import Verdict


def _side(mode, runner="v2", target="vllm", args=None):
    s = SideResult()
    s.resolved = dict(target=target, runner=runner, cudagraph_mode=mode,
                      engine=dict(engine_args=args or {"attention_backend": "FLASHINFER"}))
    return s


def test_one_mode_passes_and_a_mode_of_its_own_is_a_regression():
    same = graph_mode_check("spec", _side("PIECEWISE", "v1"), _side("PIECEWISE"))
    assert same.verdict == Verdict.PASS and same.candidate == 0.0
    assert same.note == "baseline PIECEWISE, candidate PIECEWISE"
    own = graph_mode_check("spec", _side("PIECEWISE", "v1"), _side("FULL_AND_PIECEWISE"))
    assert own.verdict == Verdict.REGRESSION and own.candidate == 1.0
    assert own.note.startswith("baseline PIECEWISE, candidate FULL_AND_PIECEWISE")


def test_other_engine_arguments_are_reported_and_other_engines_not_compared():
    given = graph_mode_check("spec", _side("PIECEWISE", "v1"),
                             _side("FULL", args={"cudagraph_mode": "FULL"}))
    assert given.verdict == Verdict.INFO and "different engine arguments" in given.note
    assert graph_mode_check("g", _side("NONE", "v1", target="bundled"), _side("NONE")) is None
    assert graph_mode_check("g", _side(None, "v1"), _side("PIECEWISE")) is None
