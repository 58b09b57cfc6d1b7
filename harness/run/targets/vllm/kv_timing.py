"""Host time in a PD engine's KV connector calls: one clock for both measuring connectors.

The example connector (kv_connector.py) and the NIXL one (kv_nixl.py) time their worker-side
calls alike: each call runs inside the profiler range `mrbench::kv_transfer`, so its host
syncs and ops count against the transfer and not against the runner's hot path, and its host
seconds add up here until the session takes them after the engine's step (`take`). Like
vLLM's later releases do inside their connectors, the calls are exempt from vLLM's own sync
checker (`gpu_sync_allowed`): a connector's bulk copies are deliberate.

One accumulator per process serves every engine in it (vLLM keeps the worker-side connector
in a process global), so the session takes it after each engine's step, one engine at a
time. This module imports nothing of vLLM or torch until a connector call is timed: the
session and the rank hooks read it in processes that run no connector.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Callable

_seconds = 0.0                 # host seconds in connector calls since the last take
_tools: tuple[Any, str, Any] | None = None   # resolved at the first timed call (_resolve)


def take() -> float:
    """Host seconds the worker-side connector spent since the last call (then zero)."""
    global _seconds
    out, _seconds = _seconds, 0.0
    return out


def _resolve() -> tuple[Any, str, Any]:
    """The profiler range, its label and vLLM's sync exemption, looked up once: a connector
    call comes per layer and step, and a failing import searches the path every time."""
    global _tools
    if _tools is None:
        import torch

        from ....measure.phases import TRANSFER_LABEL
        try:     # vLLM's own exemption for deliberate bulk copies from its sync checker
            from vllm.utils.gpu_sync_debug import gpu_sync_allowed
        except ImportError:             # a release without the checker: nothing to exempt
            gpu_sync_allowed = contextlib.nullcontext
        _tools = (torch.profiler.record_function, TRANSFER_LABEL, gpu_sync_allowed)
    return _tools


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` inside the transfer's profiler range, its host time added up."""
    global _seconds
    record_function, label, sync_allowed = _resolve()
    t0 = time.perf_counter()
    try:
        with record_function(label), sync_allowed():
            return fn(*args, **kwargs)
    finally:
        _seconds += time.perf_counter() - t0
