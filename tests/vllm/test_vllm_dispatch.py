"""Warmup coverage on vLLM: the batch classes each runner's warmup ran and serving used,
recorded in the engine's process (mrbench.harness.run.targets.vllm.dispatch), and the 40746 fault's
patch mechanism (a decorated module-level function, rebound where it was imported).

The recording on the real engines is asserted on the GPU (tests/test_vllm_gpu.py); here,
the classification and the wrappers on stand-in runners with vLLM's own signatures."""
import sys
import types

import pytest

from mrbench.harness.run.targets.vllm import dispatch as vd
from mrbench.harness.run.targets.vllm import faults as vllm_faults
from mrbench.workloads.warmup_coverage import WORKLOAD, Params


def test_a_batch_is_a_uniform_decode_only_at_the_decode_query_length():
    assert vd.batch_class([2, 2, 2], 2) == "uniform_decode(q=2)"
    assert vd.batch_class([3, 3], 2) == "mixed"        # uniform, but a prefill of 3
    assert vd.batch_class([2, 1], 2) == "mixed"
    # the 40746 case: with k = 1 a 2-token warmup prompt *is* a decode query
    assert vd.batch_class([2] * 4, 1 + 1) == "uniform_decode(q=2)"
    assert vd.batch_class([1 + 1 + 1] * 4, 1 + 1) == "mixed"        # the fix: 2 + k


class _Sched:
    def __init__(self, n):
        self.num_scheduled_tokens = {str(i): t for i, t in enumerate(n)}


class _V2Runner:
    """Stand-in with V2's execute_model signature (vllm/v1/worker/gpu/model_runner.py)."""
    decode_query_len = 2

    def execute_model(self, scheduler_output, intermediate_tensors=None, dummy_run=False,
                      skip_attn_for_dummy_run=False, is_profile=False):
        return "ran"


class _V1Runner:
    """Stand-in with V1's signatures (vllm/v1/worker/gpu_model_runner.py)."""
    uniform_decode_query_len = 3

    def execute_model(self, scheduler_output, intermediate_tensors=None):
        return "ran"

    def _dummy_run(self, num_tokens, cudagraph_runtime_mode=None, force_attention=False,
                   uniform_decode=False, allow_microbatching=True, skip_eplb=False,
                   is_profile=False):
        return "dummy"


def test_v2_warmup_steps_count_dummy_runs_do_not_and_serving_is_separate():
    vd._wrap(_V2Runner, "execute_model", vd._v2_execute_model)
    vd._wrap(_V2Runner, "execute_model", vd._v2_execute_model)        # idempotent
    r = _V2Runner()
    r.execute_model(_Sched([4096]), dummy_run=True, is_profile=True)     # memory profile
    r.execute_model(_Sched([3, 3]))                                      # warmup prefill
    r.execute_model(_Sched([2, 2]))                                      # warmup decode
    r.execute_model(_Sched([]))                                          # nothing scheduled
    vd.serving(r)
    assert r.execute_model(_Sched([2, 3]), None) == "ran"
    r.execute_model(_Sched([2, 2]))
    assert vd.log(r) == [("dummy", "mixed"), ("warmup", "mixed"),
                         ("warmup", "uniform_decode(q=2)"), ("serve", "mixed"),
                         ("serve", "uniform_decode(q=2)")]
    assert vd.log(_V2Runner()) == []                     # per engine, not per class


def test_v1_warmup_is_its_dummy_runs_classed_by_the_flag_it_gives_the_dispatcher():
    vd._wrap(_V1Runner, "execute_model", vd._v1_execute_model)
    vd._wrap(_V1Runner, "_dummy_run", vd._v1_dummy_run)
    r = _V1Runner()
    r._dummy_run(512)
    r._dummy_run(12, None, False, True)                  # positional uniform_decode
    r._dummy_run(6, uniform_decode=True)
    vd.serving(r)
    r.execute_model(_Sched([3, 3, 3]))
    r.execute_model(_Sched([40, 3]))
    assert vd.log(r) == [("warmup", "mixed"), ("warmup", "uniform_decode(q=3)"),
                         ("warmup", "uniform_decode(q=3)"), ("serve", "uniform_decode(q=3)"),
                         ("serve", "mixed")]


def test_install_wraps_the_installed_vllm_runner_classes():
    v1 = pytest.importorskip("vllm.v1.worker.gpu_model_runner")
    vd.install()
    vd.install()
    for name in ("execute_model", "_dummy_run"):
        fn = getattr(v1.GPUModelRunner, name)
        assert fn._mrbench_dispatch and not getattr(fn.__wrapped__, "_mrbench_dispatch", False)


def test_a_decorated_module_function_is_patched_and_rebound_where_imported(monkeypatch):
    """warmup_kernels is `@torch.inference_mode()` at module level, and gpu_worker holds its
    own name for it: the patch keeps the decorator and replaces both bindings."""
    src = ("import functools\n\n\ndef deco(f):\n    @functools.wraps(f)\n"
           "    def w(*a):\n        return ('decorated', f(*a))\n    return w\n\n\n"
           "@deco\ndef warm(k):\n    prompt_len = k + 2\n    return prompt_len\n")
    mod = types.ModuleType("toy_warmup_mod")
    exec(compile(src, "toy_warmup_mod.py", "exec"), mod.__dict__)
    user = types.ModuleType("toy_worker_mod")
    user.warm = mod.warm
    monkeypatch.setitem(sys.modules, "toy_warmup_mod", mod)
    monkeypatch.setitem(sys.modules, "toy_worker_mod", user)
    monkeypatch.setattr(vllm_faults.inspect, "getsource", lambda fn: src[src.index("@deco"):])
    p = vllm_faults.SourcePatch("toy_warmup_mod", "warm", old="prompt_len = k + 2",
                                new="prompt_len = 2  # pre-fix", rebind=("toy_worker_mod",))
    assert user.warm(1) == ("decorated", 3)
    vllm_faults._apply_patch(p)
    assert mod.warm(1) == ("decorated", 2) and user.warm(1) == ("decorated", 2)


def test_the_40746_fault_is_a_vllm_fault_with_its_pr():
    f = vllm_faults.FAULTS["warmup-short-prefill"]
    assert f.pr == 40746 and f.patches[0].qualname == "warmup_kernels"
    assert f.patches[0].rebind == ("vllm.v1.worker.gpu_worker",)


def test_warmup_sweeps_k_by_proposer_with_one_k0_engine():
    tags = [t for t, _ in WORKLOAD.points(Params(ks=[0, 1, 2], proposers=["ngram", "eagle"]))]
    assert tags == ["k0", "k1-ngram", "k1-eagle", "k2-ngram", "k2-eagle"]
    opts = dict(WORKLOAD.points(Params(ks=[1], proposers=["eagle"])))["k1-eagle"]
    assert WORKLOAD.engine_options(opts).speculative_method == "eagle"
    assert WORKLOAD.engine_options(opts).num_speculative_tokens == 1
