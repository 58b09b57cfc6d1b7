"""vLLM's model-class inspection in a fork of the engine's process
(harness/run/targets/vllm/model_inspection.py): the same answer as vLLM's subprocess, from
another process, and vLLM's own subprocess whenever the fork does not answer."""
import os

import pytest

from mrbench.harness.run.targets.vllm.environment import installed_version
from mrbench.harness.run.targets.vllm.model_inspection import inspection_in_fork, run_in_fork


def test_the_answer_comes_from_another_process():
    assert run_in_fork(os.getpid) != os.getpid()
    assert run_in_fork(lambda: {"archs": ("LlamaForCausalLM",)}) == {
        "archs": ("LlamaForCausalLM",)}


def test_a_failure_in_the_fork_is_an_error_with_its_traceback():
    def boom():
        raise ValueError("no such model class")
    with pytest.raises(RuntimeError, match="no such model class"):
        run_in_fork(boom)


def test_a_fork_that_does_not_answer_in_time_is_ended():
    import time
    with pytest.raises(RuntimeError, match="no answer within"):
        run_in_fork(lambda: time.sleep(30), timeout_s=0.5)


@pytest.mark.skipif(installed_version() is None, reason="vLLM is not installed")
def test_vllm_runs_its_inspection_in_the_fork_and_falls_back_to_its_subprocess(monkeypatch):
    from vllm.model_executor.models import registry
    spawned = []
    monkeypatch.setattr(registry, "_run_in_subprocess", lambda fn: spawned.append(fn) or "sub")
    with inspection_in_fork():
        assert registry._run_in_subprocess(os.getpid) != os.getpid()
        assert spawned == []                                 # answered by the fork

        def fails():
            raise ImportError("a class that cannot import here")
        assert registry._run_in_subprocess(fails) == "sub"   # vLLM's own way, as before
        assert spawned == [fails]
    assert registry._run_in_subprocess(os.getpid) == "sub"   # restored on leaving
