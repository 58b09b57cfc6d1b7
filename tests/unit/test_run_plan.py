"""plan_run, the first stage of `mrbench run`: the whole run decided, every input checked,
before any engine starts (so bad input never leaves a partial run)."""
import pytest

from mrbench.contract import BadInput
from mrbench.harness.cli import main
from mrbench.harness.record.metrics import PERCENTILES
from mrbench.harness.record.suite import load_suite
from mrbench.harness.run.run_plan import Isolation, Overrides, plan_run
from mrbench.harness.run.targets.base import SideSpec
from mrbench.harness.run.targets.bundled import BundledTarget

BASE, CAND = SideSpec("v1"), SideSpec("v2")


@pytest.fixture
def no_engine(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("plan_run started an engine")
    monkeypatch.setattr(BundledTarget, "open", refuse)


def test_the_plan_of_quick(data_dir, no_engine, tmp_path):
    suite = load_suite("quick")
    plan = plan_run(suite, BASE, CAND, Overrides(), tmp_path / "run", Isolation())
    ids = [w.id for w in plan.workloads]
    assert ids[:2] == ["gsm8k", "gsm8k-pd"]                 # the suite's order, sweeps expanded
    assert sorted(ids) == sorted(w.id for w in plan.ordered)
    # the run's order keeps each engine shape's workloads back to back
    groups = [plan.engines.group_of(w.id) for w in plan.ordered if w.id not in plan.not_here]
    assert groups == sorted(groups)
    # what the bundled runner cannot run is known now, and gets no engine
    assert set(plan.not_here) == {"spec.k2-eagle-b4", "warmup.k1-eagle"}
    served = {wid for e in plan.engines.engines for wid in e.workloads}
    assert served == set(ids) - set(plan.not_here)
    assert plan.isolation.cold_engines == "keep" and plan.isolation.starts_at_once == 1
    assert plan.target_name == "bundled" and plan.label("candidate") == "v2"
    e = plan.engine_of("candidate", "gsm8k")
    assert plan.bank_key(e)[0] == "candidate"
    assert not (tmp_path / "run").exists()                   # nothing written either


@pytest.mark.parametrize("kwargs,needle", [
    (dict(isolation=Isolation(gpu_memory_utilization=0.99)), "--gpu-memory-utilization"),
    (dict(isolation=Isolation(build_first="both")), "--build-first must be one of"),
    (dict(isolation=Isolation(cold_engines="never")), "--cold-engines must be one of"),
    (dict(overrides=Overrides(time_scale=2.0), suite="smoke"), "--time-scale applies to no"),
    (dict(cand=SideSpec("v2", faults=("slow-step:10",)), save_reference=True),
     "--save-reference"),
])
def test_bad_input_is_refused_before_any_engine(kwargs, needle, no_engine, tmp_path):
    suite = load_suite(kwargs.pop("suite", "quick"))
    args = dict(base=BASE, cand=CAND, overrides=Overrides(), isolation=Isolation()) | kwargs
    save = args.pop("save_reference", False)
    with pytest.raises(BadInput, match=needle):
        plan_run(suite, args["base"], args["cand"], args["overrides"], tmp_path / "run",
                 args["isolation"], save_reference=save)


SMOKE = """name: smoke-pnn
percentiles: [99.9, 50]
workloads:
  - {id: gsm8k, workload: gsm8k, params: {mode: colocated, limit: 4}}
"""


def test_the_percentiles_are_the_command_lines_over_the_suites(data_dir, no_engine, tmp_path):
    """The summary's pNN_, as vLLM's --metric-percentiles chooses them: metrics.PERCENTILES
    by default, a suite's `percentiles` (ascending), --percentiles over both."""
    assert load_suite("smoke").percentiles == PERCENTILES
    (tmp_path / "s.yaml").write_text(SMOKE)
    suite = load_suite(str(tmp_path / "s.yaml"))
    assert suite.percentiles == (50.0, 99.9)
    plan = plan_run(suite, BASE, CAND, Overrides(), tmp_path / "run", Isolation())
    assert plan.percentiles == (50.0, 99.9)
    plan = plan_run(suite, BASE, CAND, Overrides(), tmp_path / "run", Isolation(),
                    percentiles=(75.0,))
    assert plan.percentiles == (75.0,)


@pytest.mark.parametrize("given,needle", [
    ("50,abc", "--percentiles takes numbers, comma-separated"),
    ("", "--percentiles takes numbers"),
    ("0,50", "percentile 0 is not in (0, 100]"),
    ("50,100.5", "percentile 100.5 is not in (0, 100]"),
    ("nan", "percentile nan is not in (0, 100]"),
])
def test_bad_percentiles_are_one_line_and_exit_2(given, needle, no_engine, tmp_path, capsys):
    for cmd in (["run", "smoke", "--out", str(tmp_path / "run")],
                ["compare", str(tmp_path / "a"), str(tmp_path / "b")]):
        assert main([*cmd, "--percentiles", given]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()


def test_a_suites_bad_percentiles_are_one_line(tmp_path):
    (tmp_path / "s.yaml").write_text(SMOKE.replace("[99.9, 50]", "[50, 101]"))
    with pytest.raises(BadInput, match=r"percentiles: .*percentile 101 is not in"):
        load_suite(str(tmp_path / "s.yaml"))
