"""Syncs, ops and allocations per step and per phase, from torch.profiler.

Counting starts only when the profiler starts, which the harness does after the session's
warmup (the same gating as vLLM's `VLLM_GPU_SYNC_CHECK`, which arms after warmup). Events
are attributed to the step and phase ranges the runner labels with `record_function`.

What counts as a sync:
- `aten::_local_scalar_dense` (the read behind `.item()`, `int(t)`, `bool(t)`; `aten::item`
  only wraps it, so it is listed but not added twice) and `aten::nonzero` (output shape
  needs the host);
- on CUDA, the runtime calls `cudaStreamSynchronize`, `cudaDeviceSynchronize`,
  `cudaEventSynchronize` and synchronous `cudaMemcpy` (a device->host copy from pageable
  memory shows as one of these).
Op counts (every `aten::` event) and allocations (ops whose own memory use is positive,
and their bytes) are deterministic for a fixed batch sequence, so a small change shows without noise.
"""
from __future__ import annotations

import bisect
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import torch
from torch.profiler import ProfilerActivity, profile

SYNC_OPS = ("aten::_local_scalar_dense", "aten::nonzero")
LISTED_OPS = SYNC_OPS + ("aten::item",)
CUDA_SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
                   "cudaMemcpy")
HOT_PHASES = ("prepare", "forward", "sample", "postprocess")   # 'output' holds the one copy


@dataclass
class Profiled:
    events: list = field(default_factory=list)


@contextmanager
def profiled(device: str) -> Iterator[Profiled]:
    """Profile CPU ops (and CUDA runtime calls on a GPU) with memory events."""
    acts = [ProfilerActivity.CPU]
    if device.startswith("cuda") and torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)
    holder = Profiled()
    with profile(activities=acts, profile_memory=True) as prof:
        yield holder
    holder.events = list(prof.events())


def _windows(events, name: str) -> tuple[list[float], list[float]]:
    w = sorted((e.time_range.start, e.time_range.end) for e in events if e.name == name)
    return [a for a, _ in w], [b for _, b in w]


def _find(starts: list[float], ends: list[float], t0: float, t1: float) -> int | None:
    i = bisect.bisect_right(starts, t0) - 1
    return i if i >= 0 and t1 <= ends[i] else None


def is_sync(name: str) -> bool:
    return name in SYNC_OPS or name in CUDA_SYNC_CALLS


def count_per_step(events, step_label: str, phase_labels: dict[str, str]) -> list[dict]:
    """One dict per step window, in time order: syncs per phase, listed sync ops, ops, allocs."""
    s_start, s_end = _windows(events, step_label)
    phases = {p: _windows(events, lab) for p, lab in phase_labels.items()}
    labels = {step_label, *phase_labels.values()}
    rows = [dict(step=i, ops=0, allocs=0, alloc_bytes=0, **{f"syncs_{p}": 0 for p in phase_labels},
                 **{n: 0 for n in LISTED_OPS + CUDA_SYNC_CALLS}) for i in range(len(s_start))]
    for e in events:
        name = e.name
        if name in labels:
            continue
        t0, t1 = e.time_range.start, e.time_range.end
        i = _find(s_start, s_end, t0, t1)
        if i is None:
            continue
        row = rows[i]
        if name == "[memory]":             # allocations/frees outside any op
            continue
        if name.startswith("aten::"):
            row["ops"] += 1
            own = max(e.self_cpu_memory_usage, 0) + max(getattr(e, "self_device_memory_usage", 0), 0)
            if own > 0:                        # this op itself allocated memory
                row["allocs"] += 1
                row["alloc_bytes"] += own
        if name in row:
            row[name] += 1
        if is_sync(name):
            for p, (ps, pe) in phases.items():
                if _find(ps, pe, t0, t1) is not None:
                    row[f"syncs_{p}"] += 1
                    break
    for row in rows:
        row["syncs_hot"] = sum(row.get(f"syncs_{p}", 0) for p in HOT_PHASES)
    return rows
