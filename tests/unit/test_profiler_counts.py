"""count_per_step (harness/measure/profiler.py) counts with arrays; this holds it to the
rule it implements, written out event by event: an event counts for the step window holding
it and for the innermost phase range holding it (the latest-starting range, the ranges of
one label merged; a tie goes to the phase listed first), labels themselves only as "the
phase ran", `[memory]` records with positive bytes as allocations. Random traces with
nested and overlapping phases, ties, events outside every step and straddling a window's
end, on CPU and CUDA rules."""
import bisect
import os
import subprocess
import sys

import numpy as np
import pytest

from mrbench.harness.measure import phases
from mrbench.harness.measure.profiler import (
    CUDA_SYNC_CALLS,
    DRIVER_LAUNCH_CALLS,
    GRAPH_LAUNCH_CALLS,
    LISTED_OPS,
    RUNTIME_LAUNCH_CALLS,
    count_per_step,
    is_sync,
)

NAMES = ("aten::mm", "aten::add", "aten::_local_scalar_dense", "aten::item", "aten::nonzero",
         "cudaStreamSynchronize", "cudaMemcpy", "cudaLaunchKernel", "cuLaunchKernel",
         "cudaGraphLaunch", "[memory]", "misc")


def _reference(events, step_label, phase_labels, device):
    """The rule, one event at a time."""
    def windows(label):
        w = sorted((a, b) for n, a, b, _ in events if n == label)
        return [a for a, _ in w], [b for _, b in w]

    def merged(starts, ends):
        out: list[list[int]] = []
        for a, b in zip(starts, ends):
            if out and a <= out[-1][1]:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        return [a for a, _ in out], [b for _, b in out]

    def holding(starts, ends, t0, t1):
        i = bisect.bisect_right(starts, t0) - 1
        return i if i >= 0 and t1 <= ends[i] else None

    steps = windows(step_label)
    ranges = {p: merged(*windows(lab)) for p, lab in phase_labels.items()}
    of_label = {lab: p for p, lab in phase_labels.items()}
    rows = [dict(step=i, ops=0, allocs=0, alloc_bytes=0,
                 **{f"{k}_{p}": 0 for k in ("syncs", "ops", "events", "ran")
                    for p in phase_labels},
                 **{n: 0 for n in LISTED_OPS + CUDA_SYNC_CALLS})
            for i in range(len(steps[0]))]
    cuda = device.startswith("cuda")
    if cuda:
        for row in rows:
            row.update(launches=0, graph_launches=0,
                       **{f"{k}_{p}": 0 for k in ("launches", "graph_launches")
                          for p in phase_labels})
    runtime = [(a, b) for n, a, b, _ in events if n in RUNTIME_LAUNCH_CALLS]
    for name, t0, t1, nbytes in events:
        i = holding(*steps, t0, t1)
        if i is None:
            continue
        row = rows[i]
        if name == step_label or name in of_label:
            if name in of_label:
                row[f"ran_{of_label[name]}"] += 1
            continue
        best, best_start = None, -1
        for p, (ps, pe) in ranges.items():
            j = holding(ps, pe, t0, t1)
            if j is not None and ps[j] > best_start:
                best, best_start = p, ps[j]
        if best is not None:
            row[f"events_{best}"] += 1
        if name == "[memory]":
            if nbytes > 0:
                row["allocs"] += 1
                row["alloc_bytes"] += nbytes
            continue
        aten = name.startswith("aten::")
        row["ops"] += aten
        if name in LISTED_OPS + CUDA_SYNC_CALLS:
            row[name] += 1
        if best is not None:
            row[f"ops_{best}"] += aten
            row[f"syncs_{best}"] += is_sync(name, device)
        # a driver launch inside a runtime launch call is that call's own, not another
        launch = name in RUNTIME_LAUNCH_CALLS or (
            name in DRIVER_LAUNCH_CALLS and not any(a <= t0 and t1 <= b for a, b in runtime))
        for kind, hit in (("launches", launch), ("graph_launches", name in GRAPH_LAUNCH_CALLS)):
            if cuda and hit:
                row[kind] += 1
                if best is not None:
                    row[f"{kind}_{best}"] += 1
    for row in rows:
        row["syncs_hot"] = sum(row[f"syncs_{p}"] for p in phases.HOT_PHASES if p in phase_labels)
    return rows


def _trace(rng: np.random.Generator) -> list[tuple[str, int, int, int]]:
    """A few steps; in each, phase ranges (some nested, some sharing a start, one phase
    twice), ops and memory records anywhere, some outside every step or across its end."""
    events = []
    labels = list(phases.PHASE_LABELS.values())
    t = 0
    for _ in range(rng.integers(1, 6)):
        start, end = t + 5, t + 5 + int(rng.integers(200, 400))
        events.append((phases.STEP_LABEL, start, end, 0))
        for _ in range(rng.integers(0, 8)):
            a = int(rng.integers(start, end - 10))
            b = int(rng.integers(a + 1, end + 1))
            events.append((labels[rng.integers(len(labels))], a, b, 0))
            if rng.random() < 0.3:                      # another phase from the same start
                other = labels[rng.integers(len(labels))]
                events.append((other, a, int(rng.integers(a, b + 1)), 0))
        for _ in range(rng.integers(0, 60)):
            a = int(rng.integers(t, end + 20))          # sometimes before or across the step
            b = a + int(rng.integers(0, 15))
            name = NAMES[rng.integers(len(NAMES))]
            events.append((name, a, b, int(rng.integers(-64, 256)) if name == "[memory]" else 0))
        t = end + int(rng.integers(0, 30))
    rng.shuffle(events)
    return events


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_array_counts_follow_the_rule_event_by_event(device):
    rng = np.random.default_rng(7)
    for _ in range(300):
        events = _trace(rng)
        got = count_per_step(events, phases.STEP_LABEL, phases.PHASE_LABELS, device)
        assert got == _reference(events, phases.STEP_LABEL, phases.PHASE_LABELS, device)


def test_no_events_no_steps_and_no_phase_ranges():
    assert count_per_step([], phases.STEP_LABEL, phases.PHASE_LABELS) == []
    [row] = count_per_step([(phases.STEP_LABEL, 0, 10, 0), ("aten::mm", 2, 3, 0)],
                           phases.STEP_LABEL, phases.PHASE_LABELS)
    assert row["ops"] == 1 and all(row[f"events_{p}"] == 0 for p in phases.PHASE_LABELS)


# --- threads: an event counts only for phase ranges of its own thread -----------------

def _by_thread_reference(events, device):
    """The rule for threads that all label phases: each thread's events against its own
    ranges (the steps cut by time, whoever labels them), the rows summed over threads."""
    steps = [e[:4] for e in events if e[0] == phases.STEP_LABEL]
    total = None
    for g in sorted({e[4] for e in events}):
        mine = [e[:4] for e in events if e[4] == g and e[0] != phases.STEP_LABEL]
        rows = _reference(steps + mine, phases.STEP_LABEL, phases.PHASE_LABELS, device)
        total = rows if total is None else [
            {k: (a[k] if k == "step" else a[k] + b[k]) for k in a} for a, b in zip(total, rows)]
    return total


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_two_labelled_threads_each_count_against_their_own_ranges(device):
    rng = np.random.default_rng(11)
    labels = set(phases.PHASE_LABELS.values())
    checked = 0
    for _ in range(300):
        events = [e + (int(rng.integers(1, 3)),) for e in _trace(rng)]
        if {e[4] for e in events if e[0] in labels} != {1, 2}:
            continue                                  # both threads must label a phase
        checked += 1
        got = count_per_step(events, phases.STEP_LABEL, phases.PHASE_LABELS, device)
        assert got == _by_thread_reference(events, device)
    assert checked > 100


def test_one_thread_id_is_the_rule_by_time_alone():
    rng = np.random.default_rng(5)
    for _ in range(100):
        events = _trace(rng)
        assert (count_per_step([e + (3,) for e in events], phases.STEP_LABEL,
                               phases.PHASE_LABELS, "cuda")
                == count_per_step(events, phases.STEP_LABEL, phases.PHASE_LABELS, "cuda"))


L = phases.PHASE_LABELS
ENGINE, HELPER, ENGINE_OS, HELPER_OS = 1, 2, 9001, 9002   # torch's ids, then CUPTI's


def _async_output_trace(steps=10, overlap=(3, 7), engine_sync_in_prepare=False):
    """vLLM's async scheduling: the engine thread labels the steps and the hot phases and
    launches kernels (runtime calls under its OS id); the output thread labels `output` and
    waits there for the copy's event (under its own OS id). In the `overlap` steps the
    wait runs while the engine samples the next step, inside its `sample` range."""
    ev = []
    for i in range(steps):
        s = i * 1000
        ev += [(phases.STEP_LABEL, s, s + 900, 0, ENGINE),
               (L["prepare"], s + 10, s + 200, 0, ENGINE),
               ("cudaLaunchKernel", s + 50, s + 52, 0, ENGINE_OS),
               ("aten::add", s + 60, s + 70, 0, ENGINE),
               (L["forward"], s + 210, s + 500, 0, ENGINE),
               ("cudaLaunchKernel", s + 300, s + 302, 0, ENGINE_OS),
               (L["sample"], s + 510, s + 700, 0, ENGINE),
               ("cudaLaunchKernel", s + 520, s + 522, 0, ENGINE_OS),
               (L["postprocess"], s + 710, s + 800, 0, ENGINE)]
        if engine_sync_in_prepare:                  # PR 40654 put back: the step's own sync
            ev.append(("cudaStreamSynchronize", s + 100, s + 110, 0, ENGINE_OS))
        w = s + 505 if i in overlap else s + 820    # the wait: across sample's start, or after
        ev += [(L["output"], w, w + 60, 0, HELPER),
               ("aten::copy_", w + 5, w + 8, 0, HELPER),
               ("cudaEventSynchronize", w + 10, w + 50, 0, HELPER_OS)]
    return ev


def test_the_output_threads_wait_stays_in_output_when_the_engine_samples_meanwhile():
    rows = count_per_step(_async_output_trace(), phases.STEP_LABEL, L, "cuda")
    assert [r["syncs_output"] for r in rows] == [1] * 10
    assert [r["syncs_sample"] for r in rows] == [0] * 10
    assert all(r["syncs_hot"] == 0 for r in rows)
    assert [r["ops_output"] for r in rows] == [1] * 10          # the helper's own CPU op
    assert [r["ops_prepare"] for r in rows] == [1] * 10
    assert [r["events_sample"] for r in rows] == [1] * 10       # its kernel launch only
    # by time alone (no thread ids), the overlapping steps gave the wait to sample
    by_time = count_per_step([e[:4] for e in _async_output_trace()], phases.STEP_LABEL, L,
                             "cuda")
    assert [r["syncs_sample"] for r in by_time] == [0, 0, 0, 1, 0, 0, 0, 1, 0, 0]


def test_the_same_without_cupti_ids():
    """A profiler that records runtime calls under the torch thread id: no map needed."""
    os_to_torch = {ENGINE_OS: ENGINE, HELPER_OS: HELPER}
    ev = [e[:4] + (os_to_torch.get(e[4], e[4]),) for e in _async_output_trace()]
    rows = count_per_step(ev, phases.STEP_LABEL, L, "cuda")
    assert [(r["syncs_output"], r["syncs_sample"]) for r in rows] == [(1, 0)] * 10


def test_an_engine_sync_still_counts_in_its_phase():
    """The 40654 re-injection: the engine thread's own sync in prepare, every step."""
    rows = count_per_step(_async_output_trace(engine_sync_in_prepare=True),
                          phases.STEP_LABEL, L, "cuda")
    assert [r["syncs_prepare"] for r in rows] == [1] * 10
    assert [r["syncs_hot"] for r in rows] == [1] * 10
    assert [r["syncs_output"] for r in rows] == [1] * 10


def test_a_helpers_long_wait_does_not_take_the_engines_runtime_calls():
    """A helper (lower torch id than the engine) whose output range spans the whole step:
    every engine runtime call is held by both threads' ranges, so none places the engine's
    OS thread, and the tie goes to the thread that labels the steps."""
    engine, helper = 5, 1
    ev = []
    for i in range(4):
        s = i * 1000
        ev += [(phases.STEP_LABEL, s, s + 900, 0, engine),
               (L["output"], s, s + 890, 0, helper),
               (L["prepare"], s + 10, s + 200, 0, engine),
               ("cudaStreamSynchronize", s + 100, s + 110, 0, ENGINE_OS),
               (L["sample"], s + 510, s + 700, 0, engine),
               ("cudaLaunchKernel", s + 520, s + 522, 0, ENGINE_OS)]
    rows = count_per_step(ev, phases.STEP_LABEL, L, "cuda")
    assert [(r["syncs_prepare"], r["syncs_output"]) for r in rows] == [(1, 0)] * 4
    assert [r["events_sample"] for r in rows] == [1] * 4


# --- the GPU's timeline: copies of labelled ranges are not host ranges ------------------

class _KinetoEvent:
    def __init__(self, name, t0, t1, nbytes, tid, device):
        self._e = (name, t0, t1, nbytes, tid)
        self._device = device

    def name(self): return self._e[0]
    def start_ns(self): return self._e[1]
    def end_ns(self): return self._e[2]
    def nbytes(self): return self._e[3]
    def start_thread_id(self): return self._e[4]
    def device_type(self): return self._device


def _one_thread_trace_with_gpu_copies(steps=6, late=(1, 4)):
    """One engine thread (vLLM 0.26's single-process executor waits for the output on the
    engine's own thread). The profiler also records the GPU's copy of each labelled range
    that launched work, under the same name and thread; in the `late` steps the GPU's copy
    of the next step's `sample` starts while the host waits for this step's output."""
    from torch.autograd import DeviceType
    CPU, GPU = DeviceType.CPU, DeviceType.CUDA
    ev = []
    for i in range(steps):
        s = i * 1000
        ev += [(phases.STEP_LABEL, s, s + 950, 0, ENGINE, CPU),
               (L["prepare"], s + 10, s + 200, 0, ENGINE, CPU),
               (L["sample"], s + 510, s + 700, 0, ENGINE, CPU),
               ("aten::argmax", s + 520, s + 530, 0, ENGINE, CPU),
               (L["output"], s + 800, s + 900, 0, ENGINE, CPU),
               ("cudaEventSynchronize", s + 810, s + 890, 0, ENGINE, CPU),
               ("[memory]", s + 20, s + 20, 512, ENGINE, GPU),     # a GPU allocation's record
               ("void sampling_kernel<float>", s + 600, s + 640, 0, 0, GPU)]
        g = (s + 805, s + 895) if i in late else (s + 560, s + 620)    # the GPU's `sample`
        ev.append((L["sample"], *g, 0, ENGINE, GPU))
    return [_KinetoEvent(*e) for e in ev]


def test_the_gpus_copy_of_a_phase_does_not_take_the_hosts_output_wait():
    from types import SimpleNamespace

    from mrbench.harness.measure.profiler import _raw_events
    kineto = _one_thread_trace_with_gpu_copies()
    prof = SimpleNamespace(profiler=SimpleNamespace(
        kineto_results=SimpleNamespace(events=lambda: kineto)))
    kept = _raw_events(prof)
    names = [e[0] for e in kept]
    assert names.count(L["sample"]) == 6 and "void sampling_kernel<float>" not in names
    assert names.count("[memory]") == 6                 # allocations kept, whatever device
    rows = count_per_step(kept, phases.STEP_LABEL, L, "cuda")
    assert [(r["syncs_output"], r["syncs_sample"]) for r in rows] == [(1, 0)] * 6
    assert [r["allocs"] for r in rows] == [1] * 6
    # read as host ranges, the GPU's copies took the wait in the late steps
    everything = [k._e for k in kineto]
    rows = count_per_step(everything, phases.STEP_LABEL, L, "cuda")
    assert [r["syncs_sample"] for r in rows] == [0, 1, 0, 0, 1, 0]



_ADVICE_PROBE = """
import numpy as np
from mrbench.harness.measure.profiler import _no_huge_page_advice

def advised(a):  # the kernel's VmFlags of the array's middle: numpy advises from its first
    addr = a.__array_interface__["data"][0] + a.nbytes // 2    # whole page on
    in_it = False
    for line in open("/proc/self/smaps"):
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            in_it = lo <= addr < hi
        elif in_it and head == "VmFlags:":
            return "hg" in line.split()[1:]

outside = np.ones(2 << 20)                      # 16 MiB
with _no_huge_page_advice():
    inside = np.ones(2 << 20)
after = np.ones(2 << 20)
print(advised(outside), advised(inside), advised(after))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's smaps")
def test_the_counts_own_large_arrays_ask_for_no_huge_pages():
    """numpy advises huge pages for arrays of 4 MiB or more, which puts a process on
    khugepaged's list for life (bursts of 100-300 ms on a 2-core machine): the count arrays
    must not be advised, and the runner's own arrays keep numpy's advice. In a process of
    its own: the allocator's state in a long one (an earlier array's advised memory reused)
    would say nothing of the advice."""
    out = subprocess.run([sys.executable, "-c", _ADVICE_PROBE], capture_output=True,
                         text=True, check=True).stdout.split()
    outside, inside, after = (x == "True" for x in out)
    if not outside:
        pytest.skip("this numpy advises no huge pages at all (NUMPY_MADVISE_HUGEPAGE=0)")
    assert not inside and after
