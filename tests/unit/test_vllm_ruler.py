"""`slow-step:PCT` on the vllm target (harness/run/targets/vllm_ruler.py), without vLLM: a
fake runner class stands in for vLLM's. The wrapper adds busy work of PCT % of the engine
step the harness measured (fed back), passes arguments, keywords and the result through, keeps
one ruler per runner instance, and leaves unarmed runners, dummy runs and empty steps
alone; the target accepts the ruler on either runner and refuses a malformed one."""
import time
from types import SimpleNamespace

import pytest

from mrbench.contract import BadInput
from mrbench.harness.run.targets import vllm as vllm_target
from mrbench.harness.run.targets import vllm_args, vllm_ruler
from mrbench.harness.run.targets.base import SideSpec
from mrbench.runner_impl.slow_step import SlowStep

WORK_S = 0.02          # the fake step's own busy time


def _busy(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def _fake_runner_class():
    """A fresh class per test: wrapping is per class, as vLLM's runner classes are."""

    class Base:
        def execute_model(self, scheduler_output, intermediate_tensors=None, dummy_run=False):
            self.calls += 1
            _busy(WORK_S)
            return ("out", scheduler_output, intermediate_tensors, dummy_run)

    class FakeRunner(Base):           # inherits execute_model, as CPUModelRunner does
        def __init__(self):
            self.device = "cpu"
            self.calls = 0

    return FakeRunner


def _sched(tokens: int = 4):
    return SimpleNamespace(total_num_scheduled_tokens=tokens)


def _timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


@pytest.mark.parametrize("pct", [50, 100, 200])
def test_an_armed_runner_spins_pct_of_the_measured_step_once_one_was_fed_back(pct):
    """The base is the step the harness measured (fed back with `observe_step`), not the
    wrapped call's own time: a 3x longer step than the call makes a 3x longer spin."""
    cls = _fake_runner_class()
    vllm_ruler.wrap(cls)
    runner = cls()
    vllm_ruler.arm(runner, pct)
    ruler = vllm_ruler.ruler_of(runner)
    sched = _sched()
    out, took = _timed(runner.execute_model, sched, intermediate_tensors="it")
    assert out == ("out", sched, "it", False) and runner.calls == 1
    assert ruler.added_ms_total == 0                     # no base for the class yet
    step_ms = 3 * WORK_S * 1e3                           # the engine step around the call
    assert ruler.observe_step(step_ms, vllm_ruler.step_key(4)) == 0
    out, took = _timed(runner.execute_model, sched, intermediate_tensors="it")
    # the spin lasts PCT % of the measured step: a lower bound by construction, not a
    # timing target
    assert runner.calls == 2 and took >= WORK_S + pct / 100 * step_ms / 1e3
    added = ruler.observe_step(step_ms * (1 + pct / 100), vllm_ruler.step_key(4))
    assert added == pytest.approx(pct / 100 * step_ms, rel=0.2)
    assert ruler.base_ms[("mixed", 3)] == pytest.approx(step_ms, rel=0.1)  # its part left out


def test_unarmed_runners_dummy_runs_and_empty_steps_pass_through(monkeypatch):
    ran = []
    real_run = SlowStep.run

    def counting_run(self, fn, *args, **kwargs):
        ran.append(self)
        return real_run(self, fn, *args, **kwargs)
    monkeypatch.setattr(SlowStep, "run", counting_run)
    cls = _fake_runner_class()
    vllm_ruler.wrap(cls)
    vllm_ruler.wrap(cls)                                 # idempotent: one wrapper
    clean, slowed = cls(), cls()
    vllm_ruler.arm(slowed, 100)
    assert clean.execute_model(_sched())[0] == "out" and vllm_ruler.ruler_of(clean) is None
    assert slowed.execute_model(_sched(), dummy_run=True)[3] is True      # a dummy run
    assert slowed.execute_model(_sched(0))[0] == "out"                    # nothing scheduled
    assert ran == []
    slowed.execute_model(scheduler_output=_sched())                        # by keyword
    assert ran == [vllm_ruler.ruler_of(slowed)]
    assert clean.calls == 1 and slowed.calls == 3


def test_each_runner_instance_has_its_own_ruler():
    cls = _fake_runner_class()
    vllm_ruler.wrap(cls)
    a, b = cls(), cls()
    vllm_ruler.arm(a, 20)
    vllm_ruler.arm(b, 50)
    ra, rb = vllm_ruler.ruler_of(a), vllm_ruler.ruler_of(b)
    assert ra is not rb and (ra.frac, rb.frac) == pytest.approx((0.2, 0.5))
    assert not ra.cuda and not rb.cuda                  # the runner's own device: cpu


def test_a_runner_whose_class_was_not_wrapped_is_refused():
    runner = _fake_runner_class()()
    with pytest.raises(RuntimeError, match="did not wrap"):
        vllm_ruler.arm(runner, 20)


def test_the_ruler_wraps_the_runner_class_vllm_builds():
    assert vllm_ruler.runner_class_path("v1", "cpu") == (
        "vllm.v1.worker.cpu_model_runner", "CPUModelRunner")
    assert vllm_ruler.runner_class_path("v1", "cuda:1") == (
        "vllm.v1.worker.gpu_model_runner", "GPUModelRunner")
    assert vllm_ruler.runner_class_path("v2", "cuda") == (
        "vllm.v1.worker.gpu.model_runner", "GPUModelRunner")


def test_the_ruler_is_split_from_the_historic_faults():
    assert vllm_ruler.split(()) == ((), None)
    assert vllm_ruler.split(("seq-lens-sync", "slow-step:7.5")) == (("seq-lens-sync",), 7.5)
    for bad, words in (("slow-step", "write slow-step:PCT"), ("slow-step:abc", "write"),
                       ("slow-step:0", "PCT must be"), ("slow-step:-5", "PCT must be"),
                       ("slow-step:5000", "PCT must be")):
        with pytest.raises(BadInput, match=words):
            vllm_ruler.split((bad,))
    with pytest.raises(BadInput, match="one slow-step:PCT per side"):
        vllm_ruler.split(("slow-step:10", "slow-step:20"))


def _validate(monkeypatch, side: SideSpec, version: str | None = "0.26.0",
              cuda: bool = True) -> None:
    """The target's validate with the vLLM release and CUDA it would see on a GPU box."""
    monkeypatch.setattr(vllm_target, "installed_version", lambda: version)
    monkeypatch.setattr(vllm_target.torch.cuda, "is_available", lambda: cuda)
    vllm_target.VllmTarget().validate(side)


@pytest.mark.parametrize("runner, device", [("v1", "cpu"), ("v1", "cuda"), ("v2", "cuda")])
def test_the_vllm_target_takes_the_ruler_on_either_runner(monkeypatch, runner, device):
    _validate(monkeypatch, SideSpec(runner, device=device, target="vllm",
                                    faults=("slow-step:20",)))


def test_a_historic_fault_and_the_ruler_together_run_on_v2_only(monkeypatch):
    both = ("seq-lens-sync", "slow-step:20")
    _validate(monkeypatch, SideSpec("v2", device="cuda", target="vllm", faults=both))
    with pytest.raises(BadInput, match="v1 runner has none .got 'seq-lens-sync'"):
        _validate(monkeypatch, SideSpec("v1", target="vllm", faults=both))
    with pytest.raises(BadInput, match="written against vLLM 0.26.0"):   # still version-checked
        _validate(monkeypatch, SideSpec("v2", device="cuda", target="vllm", faults=both),
                  version="0.32.0")


@pytest.mark.parametrize("bad", ["slow-step", "slow-step:abc", "slow-step:0", "slow-step:-1",
                                 "slow-step:1001"])
def test_a_malformed_ruler_is_refused_on_the_vllm_target(monkeypatch, bad):
    with pytest.raises(BadInput, match="slow-step") as e:
        _validate(monkeypatch, SideSpec("v1", target="vllm", faults=(bad,)))
    assert "\n" not in str(e.value)


def test_a_slowed_side_never_shares_an_engine_with_a_clean_one():
    from mrbench.contract import EngineOptions
    clean = SideSpec("v1", target="vllm")
    slowed = SideSpec("v1", target="vllm", faults=("slow-step:20",))
    opts = EngineOptions()
    assert vllm_args.engine_key(clean, opts, "/m", 64) != \
        vllm_args.engine_key(slowed, opts, "/m", 64)


def test_a_folder_named_vllm_is_not_vllm(monkeypatch):
    """pytest puts tests/ on sys.path, where tests/vllm is a namespace package: without
    vLLM installed that folder must not pass for it (the vllm tests would fail on "cannot
    import name 'LLM'" instead of skipping, and validate would not say "needs vLLM")."""
    from importlib.machinery import ModuleSpec
    folder = ModuleSpec("vllm", None, is_package=True)          # origin None: a folder
    monkeypatch.setattr(vllm_args.importlib.util, "find_spec", lambda name: folder)
    assert vllm_args.installed_version() is None
    real = ModuleSpec("vllm", None, origin="/site/vllm/__init__.py")
    monkeypatch.setattr(vllm_args.importlib.util, "find_spec", lambda name: real)
    monkeypatch.setattr(vllm_args, "version", lambda dist: "0.26.0")
    assert vllm_args.installed_version() == "0.26.0"
