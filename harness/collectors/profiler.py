"""Syncs, ops and allocations per step and per phase, from torch.profiler.

Counting starts only when the profiler starts, which the harness does after the session's
warmup (the same gating as vLLM's `VLLM_GPU_SYNC_CHECK`, which arms after warmup). Events
are attributed to the step and phase ranges the runner labels with `record_function`.

What counts as a sync depends on the device, because a sync is the host waiting for the
device:
- on CUDA, the runtime calls `cudaStreamSynchronize`, `cudaDeviceSynchronize`,
  `cudaEventSynchronize` and synchronous `cudaMemcpy` (a device->host copy from pageable
  memory shows as one of these). `aten::_local_scalar_dense` (behind `.item()`) is listed
  but not counted: on a CPU tensor it waits for nothing (vLLM V2 reads
  `seq_lens_cpu_upper_bound.max().item()` on the host every step, by design), and on a CUDA
  tensor the runtime's own synchronize is counted already;
- on CPU there is no device to wait for, so the ops that would wait on one are counted as
  its stand-in: `aten::_local_scalar_dense` (`aten::item` only wraps it: listed, not added
  twice) and `aten::nonzero` (output shape needs the host).

Phases are the harness's own ranges (harness/phases.py); an event counts for the innermost
phase range holding it. `ran_<phase>` counts the phase's ranges in the step and
`events_<phase>` everything seen inside them, so a phase that never ran (labels that did not
attach) is told apart from one that ran without a sync, or without any torch op.
Op counts (every `aten::` event) and allocations (the allocator's records with positive
bytes, and their bytes) are deterministic for a fixed batch sequence, so a small change shows without noise.
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
from ..phases import HOT_PHASES  # 'output' holds the step's one wait for its output copy


@dataclass
class Profiled:
    events: list[tuple[str, int, int, int]] = field(default_factory=list)  # name, t0, t1, bytes


def _raw_events(prof) -> list[tuple[str, int, int, int]]:
    """(name, start_ns, end_ns, nbytes) straight from Kineto's results.

    `prof.events()` turns ~300k raw records into Python FunctionEvents with a tree of
    parents and memory attribution: 15-20 s per profiled pass on a 2-core CPU, against 0.2-0.7 s
    for the raw records. Counting needs only names, times and allocation sizes."""
    kr = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if kr is not None:
        return [(e.name(), e.start_ns(), e.end_ns(), e.nbytes()) for e in kr.events()]
    out = []          # fallback for a torch without kineto_results: the slow, public path
    for e in prof.events():
        own = max(e.self_cpu_memory_usage, 0) + max(getattr(e, "self_device_memory_usage", 0), 0)
        out.append((e.name, int(e.time_range.start * 1000), int(e.time_range.end * 1000), 0))
        if own:
            out.append(("[memory]", out[-1][1], out[-1][1], own))
    return out


@contextmanager
def profiled(device: str) -> Iterator[Profiled]:
    """Profile CPU ops (and CUDA runtime calls on a GPU) with memory events."""
    acts = [ProfilerActivity.CPU]
    if device.startswith("cuda") and torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)
    holder = Profiled()
    with profile(activities=acts, profile_memory=True) as prof:
        yield holder
    holder.events = _raw_events(prof)


def _windows(events, name: str) -> tuple[list[int], list[int]]:
    w = sorted((t0, t1) for n, t0, t1, _ in events if n == name)
    return [a for a, _ in w], [b for _, b in w]


def _find(starts: list[int], ends: list[int], t0: int, t1: int) -> int | None:
    i = bisect.bisect_right(starts, t0) - 1
    return i if i >= 0 and t1 <= ends[i] else None


def is_sync(name: str, device: str = "cpu") -> bool:
    if device.startswith("cuda"):
        return name in CUDA_SYNC_CALLS
    return name in SYNC_OPS or name in CUDA_SYNC_CALLS


def _merged(starts: list[int], ends: list[int]) -> tuple[list[int], list[int]]:
    """Union of (possibly nested) windows of one label, as disjoint sorted intervals."""
    out_s: list[int] = []
    out_e: list[int] = []
    for a, b in sorted(zip(starts, ends)):
        if out_e and a <= out_e[-1]:
            out_e[-1] = max(out_e[-1], b)
        else:
            out_s.append(a)
            out_e.append(b)
    return out_s, out_e


def count_per_step(events, step_label: str, phase_labels: dict[str, str],
                   device: str = "cpu") -> list[dict]:
    """One dict per step window, in time order: syncs per phase, listed sync ops, ops, allocs,
    and events per phase (anything seen in it: ops, runtime calls, allocations).

    Allocations are the allocator's own records (`[memory]` with positive bytes), so an
    allocation counts whichever op (or none) made it."""
    s_start, s_end = _windows(events, step_label)
    phases = {p: _merged(*_windows(events, lab)) for p, lab in phase_labels.items()}
    labels = {step_label, *phase_labels.values()}
    rows = [dict(step=i, ops=0, allocs=0, alloc_bytes=0,
                 **{f"syncs_{p}": 0 for p in phase_labels}, **{f"ops_{p}": 0 for p in phase_labels},
                 **{f"events_{p}": 0 for p in phase_labels},
                 **{f"ran_{p}": 0 for p in phase_labels},
                 **{n: 0 for n in LISTED_OPS + CUDA_SYNC_CALLS}) for i in range(len(s_start))]

    def phase_of(t0: int, t1: int) -> str | None:
        """The innermost phase range holding [t0, t1]: the latest-starting one."""
        best, best_start = None, -1
        for p, (ps, pe) in phases.items():
            i = _find(ps, pe, t0, t1)
            if i is not None and ps[i] > best_start:
                best, best_start = p, ps[i]
        return best

    label_phase = {lab: p for p, lab in phase_labels.items()}
    for name, t0, t1, nbytes in events:
        if name in labels:
            if name in label_phase:              # the phase range itself: it ran
                i = _find(s_start, s_end, t0, t1)
                if i is not None:
                    rows[i][f"ran_{label_phase[name]}"] += 1
            continue
        i = _find(s_start, s_end, t0, t1)
        if i is None:
            continue
        row = rows[i]
        p = phase_of(t0, t1)
        if p is not None:
            row[f"events_{p}"] += 1
        if name == "[memory]":
            if nbytes > 0:
                row["allocs"] += 1
                row["alloc_bytes"] += nbytes
            continue
        sync = is_sync(name, device)
        if name.startswith("aten::"):
            row["ops"] += 1
        if name in row:
            row[name] += 1
        if p is not None:
            if name.startswith("aten::"):
                row[f"ops_{p}"] += 1
            if sync:
                row[f"syncs_{p}"] += 1
    for row in rows:
        row["syncs_hot"] = sum(row.get(f"syncs_{p}", 0) for p in HOT_PHASES)
    return rows
