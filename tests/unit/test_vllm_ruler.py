"""`slow-step:PCT` on the vllm target (harness/run/targets/vllm/ruler.py), without vLLM: the
ruler spins PCT % of each step's own time at its end; the target accepts the ruler on either
runner and refuses a malformed one."""
import time

import pytest

from mrbench.contract import BadInput
from mrbench.harness.run import faults as fault_registry
from mrbench.harness.run.targets import vllm as vllm_target
from mrbench.harness.run.targets.base import SideSpec
from mrbench.harness.run.targets.vllm import engine_args as vllm_arguments
from mrbench.harness.run.targets.vllm import environment as vllm_environment
from mrbench.harness.run.targets.vllm import ruler as vllm_ruler

def _busy(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


@pytest.mark.parametrize("pct", [50, 100, 200])
def test_the_ruler_spins_pct_of_the_steps_own_time_at_its_end(pct):
    """A step of any length grows by PCT % of itself: a step 3x as long gets a spin 3x as
    long, so the tail moves as the median does."""
    ruler = vllm_ruler.StepRuler(pct)
    for work_s in (0.01, 0.03):
        t0 = time.perf_counter()
        _busy(work_s)
        added = ruler.spin_after(t0)
        took = time.perf_counter() - t0
        # the spin lasts PCT % of the step so far: a lower bound by construction, not a
        # timing target
        assert added >= pct / 100 * work_s * 1e3
        assert took >= work_s * (1 + pct / 100)
    assert ruler.slowed_steps == 2
    assert ruler.added_ms_total >= pct / 100 * 40


def test_the_ruler_records_what_it_does():
    rec = vllm_ruler.StepRuler(7.5).record()
    assert rec["name"] == "slow-step:7.5" and rec["pct"] == 7.5
    assert "end of each engine step" in rec["busy_work"] and "LLMEngine.step" in rec["wraps"]


def test_the_ruler_is_split_from_the_historic_faults():
    assert fault_registry.split(()) == ((), None)
    assert fault_registry.split(("seq-lens-sync", "slow-step:7.5")) == (("seq-lens-sync",), 7.5)
    for bad, words in (("slow-step", "write slow-step:PCT"), ("slow-step:abc", "write"),
                       ("slow-step:0", "PCT must be"), ("slow-step:-5", "PCT must be"),
                       ("slow-step:5000", "PCT must be")):
        with pytest.raises(BadInput, match=words):
            fault_registry.split((bad,))
    with pytest.raises(BadInput, match="one slow-step:PCT per side"):
        fault_registry.split(("slow-step:10", "slow-step:20"))


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
    assert vllm_arguments.engine_key(clean, opts, "/m", 64) != \
        vllm_arguments.engine_key(slowed, opts, "/m", 64)


def test_a_folder_named_vllm_is_not_vllm(monkeypatch):
    """pytest puts tests/ on sys.path, where tests/vllm is a namespace package: without
    vLLM installed that folder must not pass for it (the vllm tests would fail on "cannot
    import name 'LLM'" instead of skipping, and validate would not say "needs vLLM")."""
    from importlib.machinery import ModuleSpec
    folder = ModuleSpec("vllm", None, is_package=True)          # origin None: a folder
    monkeypatch.setattr(vllm_environment.importlib.util, "find_spec", lambda name: folder)
    assert vllm_environment.installed_version() is None
    real = ModuleSpec("vllm", None, origin="/site/vllm/__init__.py")
    monkeypatch.setattr(vllm_environment.importlib.util, "find_spec", lambda name: real)
    monkeypatch.setattr(vllm_environment, "version", lambda dist: "0.26.0")
    assert vllm_environment.installed_version() == "0.26.0"


def test_on_cpu_the_ruler_spins_the_host_only():
    """No CUDA: no device spin and no calibration (nothing queued, nothing recorded)."""
    ruler = vllm_ruler.StepRuler(20, "cpu")
    t0 = time.perf_counter()
    _busy(0.005)
    ruler.spin_after(t0)
    assert ruler.cycles_per_ms is None and ruler.device_spins == 0
    rec = ruler.record()
    assert rec["device_cycles_per_ms"] is None and "device spin" not in rec["busy_work"]
