"""The one fault registry (harness/run/faults.py): each target's faults by kind, the catch
matrix `mrbench faults` runs, and the slow-step ruler every target takes."""
import pytest

from mrbench.contract import BadInput
from mrbench.harness.run import faults as fault_registry
from mrbench.harness.run.faults import FaultKind
from mrbench.harness.run.targets import get_target
from mrbench.harness.run.targets.vllm import faults as vllm_faults
from mrbench.harness.run.targets.vllm.environment import KV_FAULTS
from mrbench.runner_impl.faults import COVERAGE_FAULTS, FAULTS, SLOW_STEP, SLOW_STEP_MAX


def test_both_targets_register_their_faults_by_kind():
    bundled = fault_registry.of_target("bundled")
    assert set(bundled) == set(FAULTS) | set(COVERAGE_FAULTS)
    assert {f.kind for f in bundled.values()} == {FaultKind.RUNNER}
    assert fault_registry.catch_matrix("bundled") == sorted(FAULTS)
    assert fault_registry.coverage_faults("bundled") == sorted(COVERAGE_FAULTS)
    vllm = fault_registry.of_target("vllm")
    assert set(vllm) == set(vllm_faults.FAULTS) | set(KV_FAULTS)
    assert {f.kind for f in vllm.values()} == {FaultKind.BUILD, FaultKind.CONNECTOR}
    assert {n for n, f in vllm.items() if f.kind == FaultKind.CONNECTOR} == set(KV_FAULTS)
    # the measuring connector's faults are reached only through NIXL: named, never defaulted
    assert set(fault_registry.coverage_faults("vllm")) == \
        set(vllm_faults.coverage_faults()) | set(KV_FAULTS)


def test_a_target_lists_what_the_registry_holds():
    for name in ("bundled", "vllm"):
        target = get_target(name)
        info = target.info()
        owner = fault_registry.owner(target)
        assert info["faults"] == fault_registry.catch_matrix(owner)
        assert info["coverage_faults"] == fault_registry.coverage_faults(owner)


def test_the_ruler_is_the_bundled_runners_switch_by_the_same_name():
    """The runner keeps its own copy of the switch (it imports nothing of the harness): the
    two must name and bound it alike."""
    assert fault_registry.RULER == SLOW_STEP and fault_registry.RULER_MAX_PCT == SLOW_STEP_MAX
    assert fault_registry.ruler_name(7.5) == "slow-step:7.5"
    assert fault_registry.ruler_pct("slow-step:7.5") == 7.5
    assert fault_registry.ruler_pct("seq-lens-sync") is None
    for bad in ("slow-step", "slow-step:x", "slow-step:0", f"slow-step:{SLOW_STEP_MAX * 2:g}"):
        with pytest.raises(BadInput):
            fault_registry.ruler_pct(bad)
