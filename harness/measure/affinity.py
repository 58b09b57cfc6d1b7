"""`--pin-cpus`: every mrbench process (the harness and the engines it spawns) on a fixed set
of CPUs.

Why: on a GPU machine the bundled runner's decode step is host-bound (the GPU mostly
idle), so its time is the speed of whichever CPU the engine's thread runs on, and that speed
moves from one ABBA wave to the next as the process wakes on another CPU. The sides
alternate, so they never compete for a CPU; pinned together they also see the same CPU,
which narrows the per-wave spread; two CPUs do not (the process still moves between them),
so one is the recommendation for the bundled target on a GPU (docs/detection-power.md,
"Noise anatomy"). On CPU runs the engines compute on these CPUs: pinning them to few CPUs
slows them down.

The affinity is set on the harness process before any engine starts; spawned children
inherit it (Linux `sched_setaffinity`). Every result records the affinity it ran with
(`environment()["device"]["cpu_affinity"]`).
"""
from __future__ import annotations

import os

import torch

from mrbench.contract import BadInput


def parse_cpu_list(spec: str) -> list[int]:
    """CPUs from a taskset-style list: "4", "4,5", "2-3,8"; sorted, no repeats."""
    cpus: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        lo, dash, hi = part.partition("-")
        try:
            first = int(lo)
            last = int(hi) if dash else first
        except ValueError:
            raise BadInput(f"--pin-cpus {spec!r}: expected CPU numbers like 4 or 4,5 or "
                           "2-3") from None
        if first < 0 or last < first:
            raise BadInput(f"--pin-cpus {spec!r}: bad range {part!r}")
        cpus.update(range(first, last + 1))
    return sorted(cpus)


def current_affinity() -> list[int] | None:
    """The CPUs this process may run on, or None where the OS does not say (not Linux)."""
    get = getattr(os, "sched_getaffinity", None)
    return sorted(get(0)) if get else None


def pin_cpus(spec: str) -> list[int]:
    """Restrict this process (and the engine processes it will spawn) to the CPUs of `spec`;
    the CPUs pinned. Bad input (a CPU this process may not use, no affinity support) is a
    `BadInput`. Engines that size thread pools from OMP_NUM_THREADS get one per CPU."""
    cpus = parse_cpu_list(spec)
    allowed = current_affinity()
    if allowed is None or not hasattr(os, "sched_setaffinity"):
        raise BadInput("--pin-cpus needs Linux CPU affinity (sched_setaffinity), which this "
                       "platform lacks")
    outside = [c for c in cpus if c not in allowed]
    if outside:
        raise BadInput(f"--pin-cpus {spec!r}: CPU(s) {outside} are not available to this "
                       f"process (allowed: {_ranges(allowed)})")
    os.sched_setaffinity(0, cpus)
    _pin_other_threads(cpus)
    os.environ.setdefault("OMP_NUM_THREADS", str(len(cpus)))     # read by spawned engines
    torch.set_num_threads(len(cpus))
    return cpus


def _pin_other_threads(cpus: list[int]) -> None:
    """Linux affinity is a thread's: `sched_setaffinity(0)` pins the calling thread and
    what it starts later, not the threads already running (torch's pools, started at
    import), which would otherwise run anywhere; pin them too."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass               # a thread that ended meanwhile


def _ranges(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    out, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            out.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(out)
