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

Phases are the harness's own ranges (harness/measure/phases.py); an event counts for the
innermost phase range of its own thread that holds it. By thread, not by time alone: with
async scheduling vLLM waits for step N's output copy on its `WorkerAsyncOutput` thread
while the engine thread samples step N+1, and by time alone that wait would count as a sync
in the sample phase (seen on a 1B model: 21 of 321 steps). `ran_<phase>` counts the phase's
ranges in the step and `events_<phase>` everything seen inside them, so a phase that never
ran (labels that did not attach) is told apart from one that ran without a sync, or without
any torch op.
Op counts (every `aten::` event) and allocations (the allocator's records with positive
bytes, and their bytes) are deterministic for a fixed batch sequence, so a small change shows without noise.

Kernel launches (CUDA only): an aten op is not a kernel, and a Triton kernel is no aten op
at all, so a runner that launches one more kernel a step (an unfused Triton kernel, a
helper kernel vLLM's V2 once launched per decode step) leaves the op count as it was. The
host's launch calls are counted instead, per step and phase: the runtime's
(`cudaLaunchKernel` and its variants: aten's kernels, cuBLAS, FlashAttention) and the
driver's (`cuLaunchKernel`, `cuLaunchKernelEx`: Triton launches through the driver), a
driver call inside a runtime launch call of its own thread not counted twice; a CUDA graph
replay (`cudaGraphLaunch`) is counted as what it is, one graph launch, in
`graph_launches_<phase>`, not as the kernels it holds. On CPU there is nothing to launch,
so the columns are left out rather than written as zeros.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Iterator

import numpy as np
import pandas as pd
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

SYNC_OPS = ("aten::_local_scalar_dense", "aten::nonzero")
LISTED_OPS = SYNC_OPS + ("aten::item",)
CUDA_SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
                   "cudaMemcpy")
# kernel launches on the host: the runtime's calls and the driver's (Triton's)
RUNTIME_LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
                        "cudaLaunchCooperativeKernelMultiDevice")
DRIVER_LAUNCH_CALLS = ("cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel")
GRAPH_LAUNCH_CALLS = ("cudaGraphLaunch", "cuGraphLaunch")
from .phases import HOT_PHASES  # 'output' holds the step's one wait for its output copy


Event = tuple[str, int, int, int, int]     # name, start_ns, end_ns, nbytes, thread id


@dataclass
class Profiled:
    events: list[Event] = field(default_factory=list)


def _raw_events(prof) -> list[Event]:
    """(name, start_ns, end_ns, nbytes, thread) straight from Kineto's results.

    `prof.events()` turns ~300k raw records into Python FunctionEvents with a tree of
    parents and memory attribution: 15-20 s per profiled pass on a 2-core CPU, against 1-2 s
    for the raw records. Counting needs only names, times and allocation sizes."""
    kr = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if kr is not None:
        # each name read once: every accessor is a call into C++, and a profiled pass
        # holds hundreds of thousands of events (400k: 1.7-2.2 s -> 1.3 s on 2 cores)
        out: list[Event] = []
        keep = out.append
        for e in kr.events():
            name = e.name()
            if _on_host(name, e.device_type()):
                keep((name, e.start_ns(), e.end_ns(), e.nbytes(), e.start_thread_id()))
        return out
    out = []          # fallback for a torch without kineto_results: the slow, public path
    for e in prof.events():
        if not _on_host(e.name, e.device_type):
            continue
        own = max(e.self_cpu_memory_usage, 0) + max(getattr(e, "self_device_memory_usage", 0), 0)
        t0, t1 = int(e.time_range.start * 1000), int(e.time_range.end * 1000)
        out.append((e.name, t0, t1, 0, e.thread))
        if own:
            out.append(("[memory]", t0, t0, own, e.thread))
    return out


def _on_host(name: str, device_type: DeviceType) -> bool:
    """Whether an event is the host's: what a step makes is counted on the host (its ops,
    runtime calls and allocations), and steps and phases are host ranges.

    With CUDA activity the profiler also records the GPU's timeline: kernels, copies, and
    a copy of every labelled range that launched GPU work (`gpu_user_annotation`, under
    the label's own name). Those copies run when the GPU gets to the work, often while the
    host is already in a later phase: read as host ranges, a step showed each busy phase
    twice, and the host's output wait fell into the GPU's copy of the next `sample`
    (vLLM 0.26 V2 on llama-1b: 7-15 of 321 decode steps a run, a different set each
    run). Allocations are kept whatever their device: `[memory]` is the allocator's host
    record, and a GPU allocation's record names the GPU."""
    return device_type == DeviceType.CPU or name == "[memory]"


def start_profile(device: str) -> profile:
    """A started profiler of CPU ops (and CUDA runtime calls on a GPU) with memory events,
    for a pass that spans calls (a tensor-parallel rank's, started and stopped by RPC);
    `stop_profile` ends it."""
    acts = [ProfilerActivity.CPU]
    if device.startswith("cuda") and torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)
    prof = profile(activities=acts, profile_memory=True)
    prof.start()
    return prof


def stop_profile(prof: profile) -> list[Event]:
    """Stop a `start_profile` profiler; its raw events (name, start_ns, end_ns, nbytes,
    thread)."""
    prof.stop()
    return _raw_events(prof)


@contextmanager
def profiled(device: str) -> Iterator[Profiled]:
    """Profile CPU ops (and CUDA runtime calls on a GPU) with memory events."""
    holder = Profiled()
    prof = start_profile(device)
    try:
        yield holder
    finally:
        holder.events = stop_profile(prof)


def is_sync(name: str, device: str = "cpu") -> bool:
    if device.startswith("cuda"):
        return name in CUDA_SYNC_CALLS
    return name in SYNC_OPS or name in CUDA_SYNC_CALLS


def _merged(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of (possibly nested) windows of one label, sorted by start, as disjoint
    sorted intervals."""
    out_s: list[int] = []
    out_e: list[int] = []
    for a, b in zip(starts.tolist(), ends.tolist()):
        if out_e and a <= out_e[-1]:
            out_e[-1] = max(out_e[-1], b)
        else:
            out_s.append(a)
            out_e.append(b)
    return np.asarray(out_s, dtype=np.int64), np.asarray(out_e, dtype=np.int64)


def _containing(starts: np.ndarray, ends: np.ndarray, t0: np.ndarray, t1: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """Per event [t0, t1]: the index of the last window (sorted by start) starting at or
    before t0, clipped to 0, and whether that window also holds t1."""
    if not len(starts):
        return np.zeros(len(t0), dtype=np.int64), np.zeros(len(t0), dtype=bool)
    i = np.searchsorted(starts, t0, side="right") - 1
    j = np.maximum(i, 0)
    return j, (i >= 0) & (t1 <= ends[j])


def _thread_of_each(tid: np.ndarray, codes: np.ndarray, u_phase: np.ndarray,
                    u_step: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """The labelled thread each event belongs to: its own, or for a thread that labels no
    phases, the labelled thread it is mapped to.

    Why a map: the profiler records CPU ops (and the harness's ranges) under torch's own
    thread ids, and the CUDA runtime calls (the syncs) under the OS thread ids CUPTI reports,
    so a runtime call's thread never labels a phase. Such a thread goes to the labelled
    thread whose phase ranges, and no other labelled thread's, hold most of its events: an
    event that two threads' ranges hold at once says nothing. A tie (none held alone
    included) goes to the thread that labels the steps, so an engine sync is never moved
    into a helper thread's phase."""
    labelled = np.unique(tid[u_phase[codes] >= 0])
    if len(labelled) < 2:                      # one thread labels phases: all is its
        return np.full(len(tid), labelled[0] if len(labelled) else 0, dtype=np.int64)
    steps_by = tid[u_step[codes]]
    step_thread = (np.bincount(np.searchsorted(labelled, steps_by[np.isin(steps_by, labelled)]),
                               minlength=len(labelled)).argmax() if len(steps_by) else 0)
    held = np.zeros((len(labelled), len(tid)), dtype=bool)   # inside a phase range of g
    for g, thread in enumerate(labelled):
        m = (tid == thread) & (u_phase[codes] >= 0)
        order = np.lexsort((t1[m], t0[m]))
        starts, ends = _merged(t0[m][order], t1[m][order])
        _, held[g] = _containing(starts, ends, t0, t1)
    alone = held & (held.sum(axis=0) == 1)
    out = tid.copy()
    for thread in np.unique(tid):
        if thread in labelled:
            continue
        mine = tid == thread
        votes = alone[:, mine].sum(axis=1)
        top = np.flatnonzero(votes == votes.max())
        out[mine] = labelled[top[0] if len(top) == 1 else step_thread]
    return out


def _inside_own(outer: np.ndarray, tid: np.ndarray, t0: np.ndarray, t1: np.ndarray
                ) -> np.ndarray:
    """Per event: whether an `outer` event of its own thread holds it ([t0, t1] within the
    outer one's); a driver launch made by a runtime launch call is that call's, not a
    second launch."""
    out = np.zeros(len(t0), dtype=bool)
    for thread in np.unique(tid[outer]):
        m = outer & (tid == thread)
        order = np.lexsort((t1[m], t0[m]))
        starts, reach = t0[m][order], np.maximum.accumulate(t1[m][order])
        own = np.flatnonzero((tid == thread) & ~outer)
        i = np.searchsorted(starts, t0[own], side="right") - 1
        out[own] = (i >= 0) & (reach[np.maximum(i, 0)] >= t1[own])
    return out


@contextmanager
def _no_huge_page_advice() -> Iterator[None]:
    """numpy's large arrays without madvise(MADV_HUGEPAGE) while the counts are made.

    Why: numpy advises huge pages for every array of 4 MiB or more (its default on Linux),
    and a large pass's count arrays are that big (quick's `gsm8k-pd`). One such advice puts
    the engine's process on khugepaged's list for life: on a machine whose transparent huge
    pages are `madvise` (the default), the kernel thread then scans it every 10 s and
    collapses its memory into huge pages, 100-300 ms of CPU a burst. On 2 cores the step a
    burst overlaps loses a core: bundled spec-decode steps of 60-270 ms against a median of
    7, seen only in workloads after the first large pass (thp_collapse_alloc in
    /proc/vmstat counts the collapses). The runner's own arrays keep numpy's default: the
    advice is off only while the harness counts, and restored after. (numpy's
    NUMPY_MADVISE_HUGEPAGE=0 says the same for a whole process, read once at its import.)"""
    try:
        from numpy._core.multiarray import _set_madvise_hugepage   # numpy 2
    except ImportError:                                             # pragma: no cover
        try:
            from numpy.core.multiarray import _set_madvise_hugepage  # numpy 1
        except ImportError:
            yield
            return
    was = _set_madvise_hugepage(False)
    try:
        yield
    finally:
        _set_madvise_hugepage(was)


def count_per_step(events, step_label: str, phase_labels: dict[str, str],
                   device: str = "cpu") -> list[dict]:
    """One dict per step window, in time order: syncs per phase, listed sync ops, ops, allocs,
    and events per phase (anything seen in it: ops, runtime calls, allocations).

    An event counts for the step window holding it (by time, whatever its thread) and for
    the innermost phase range of its own thread holding it (the latest-starting one; the
    ranges of one label merged first; a thread that labels no phases mapped as
    `_thread_of_each` says). Events without a thread id (4-tuples) are one thread's: the
    rule by time alone. Allocations are the allocator's own records (`[memory]` with
    positive bytes), so an allocation counts whichever op (or none) made it.

    Arrays, not a loop over events: a profiled pass of 8 GSM8K prompts on CPU records
    ~400k events, and a Python loop over them took ~2 s of a ~10 s pass."""
    with _no_huge_page_advice():
        return _counted_per_step(events, step_label, phase_labels, device)


def _counted_per_step(events, step_label: str, phase_labels: dict[str, str],
                      device: str) -> list[dict]:
    phases = list(phase_labels)
    listed = LISTED_OPS + CUDA_SYNC_CALLS
    # the columns, one pass each (zip(*events) took 1 s over 700k events)
    names = list(map(itemgetter(0), events))
    t0, t1, nbytes = (np.fromiter(map(itemgetter(c), events), np.int64, len(events))
                      for c in (1, 2, 3))
    threaded = bool(events) and len(events[0]) > 4
    tid = (np.fromiter(map(itemgetter(4), events), np.int64, len(events)) if threaded
           else np.zeros(len(events), dtype=np.int64))
    # what each distinct name is: tens to hundreds of names for ~400k events
    codes, uniques = pd.factorize(pd.Series(names, dtype=object))
    code_of = {u: c for c, u in enumerate(uniques)}

    def windows(label: str, of: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The label's ranges (those of the `of` events only, if given), sorted by start
        (then end)."""
        m = codes == code_of.get(label, -1)
        if of is not None:
            m &= of
        order = np.lexsort((t1[m], t0[m]))
        return t0[m][order], t1[m][order]

    s_start, s_end = windows(step_label)
    n_steps, n_ph, n_ls = len(s_start), len(phases), len(listed)
    label_phase = {phase_labels[p]: k for k, p in enumerate(phases)}
    u_label = np.array([u == step_label or u in label_phase for u in uniques], dtype=bool)
    u_phase = np.array([label_phase.get(u, -1) for u in uniques], dtype=np.int64)
    u_step = np.array([u == step_label for u in uniques], dtype=bool)
    u_aten = np.array([u.startswith("aten::") for u in uniques], dtype=bool)
    u_sync = np.array([is_sync(u, device) for u in uniques], dtype=bool)
    u_alloc = np.array([u == "[memory]" for u in uniques], dtype=bool)
    u_rt_launch = np.array([u in RUNTIME_LAUNCH_CALLS for u in uniques], dtype=bool)
    u_drv_launch = np.array([u in DRIVER_LAUNCH_CALLS for u in uniques], dtype=bool)
    u_graph = np.array([u in GRAPH_LAUNCH_CALLS for u in uniques], dtype=bool)
    u_listed = np.array([listed.index(u) if u in listed else -1 for u in uniques],
                        dtype=np.int64)
    step, in_step = _containing(s_start, s_end, t0, t1)
    thread = _thread_of_each(tid, codes, u_phase, u_step, t0, t1)
    # the innermost phase of the event's thread: phases in order, a later start wins (a
    # tie: the earlier phase)
    phase = np.full(len(t0), -1, dtype=np.int64)
    best = np.full(len(t0), -1, dtype=np.int64)
    for g in np.unique(tid[u_phase[codes] >= 0]):
        own, of_g = thread == g, tid == g
        for k, p in enumerate(phases):
            ps, pe = _merged(*windows(phase_labels[p], of_g))
            if not len(ps):
                continue
            j, inside = _containing(ps, pe, t0, t1)
            later = own & inside & (ps[j] > best)
            phase[later], best[later] = k, ps[j][later]

    def per_step(mask: np.ndarray, index: np.ndarray | None = None, size: int = 1,
                 weights: np.ndarray | None = None) -> np.ndarray:
        """Counts (or weight sums) of the masked events, per step [and index < size]."""
        at = step[mask] * size + (0 if index is None else index[mask])
        w = None if weights is None else weights[mask]
        return np.bincount(at, weights=w, minlength=n_steps * size).reshape(n_steps, size)

    is_label = u_label[codes]
    ev = in_step & ~is_label                   # what a step holds, its labels left out
    in_phase = ev & (phase >= 0)
    aten, sync, lst = u_aten[codes], u_sync[codes], u_listed[codes]
    alloc = ev & u_alloc[codes] & (nbytes > 0)
    ops, allocs = per_step(ev & aten), per_step(alloc)
    alloc_bytes = per_step(alloc, weights=nbytes.astype(np.float64))
    syncs = per_step(in_phase & sync, phase, n_ph)
    phase_ops = per_step(in_phase & aten, phase, n_ph)
    seen = per_step(in_phase, phase, n_ph)
    ran = per_step(in_step & (u_phase[codes] >= 0), u_phase[codes], n_ph)
    by_name = per_step(ev & (lst >= 0), lst, n_ls)
    cuda = device.startswith("cuda")
    if cuda:
        launch = ev & (u_rt_launch[codes] | (u_drv_launch[codes]
                                              & ~_inside_own(u_rt_launch[codes], tid, t0, t1)))
        graph = ev & u_graph[codes]
        launches, graphs = per_step(launch), per_step(graph)
        phase_launches = per_step(launch & (phase >= 0), phase, n_ph)
        phase_graphs = per_step(graph & (phase >= 0), phase, n_ph)
    rows = []
    for i in range(n_steps):
        row = dict(step=i, ops=int(ops[i, 0]), allocs=int(allocs[i, 0]),
                   alloc_bytes=int(round(alloc_bytes[i, 0])),
                   **{f"syncs_{p}": int(syncs[i, k]) for k, p in enumerate(phases)},
                   **{f"ops_{p}": int(phase_ops[i, k]) for k, p in enumerate(phases)},
                   **{f"events_{p}": int(seen[i, k]) for k, p in enumerate(phases)},
                   **{f"ran_{p}": int(ran[i, k]) for k, p in enumerate(phases)},
                   **{n: int(by_name[i, k]) for k, n in enumerate(listed)})
        row["syncs_hot"] = sum(row.get(f"syncs_{p}", 0) for p in HOT_PHASES)
        if cuda:
            row.update(launches=int(launches[i, 0]), graph_launches=int(graphs[i, 0]),
                       **{f"launches_{p}": int(phase_launches[i, k])
                          for k, p in enumerate(phases)},
                       **{f"graph_launches_{p}": int(phase_graphs[i, k])
                          for k, p in enumerate(phases)})
        rows.append(row)
    return rows
