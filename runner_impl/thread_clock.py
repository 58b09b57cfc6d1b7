"""The stepping thread's own clock: CPU time and context switches, to set beside a step's
wall time.

Why: a step's wall time is the runner's work plus the time its thread was kept off the CPU.
On a host-bound GPU step (~0.5 ms of Python) a neighbour on the same CPU (a hypervisor, an
interrupt, another thread, another thread's hold on the GIL) can stretch steps tenfold for
tens of milliseconds, and the wall time alone cannot tell that from a slower runner. These
clocks can: work shows as CPU time; a neighbour as wall time without it, with the OS's
involuntary switches when something else was given the CPU, or voluntary ones when the
thread waited (for the device, a lock, the GIL). They showed that tenfold step bursts on a
GPU host are no neighbour: the thread kept the CPU throughout, and the whole machine ran
slow (docs/detection-power.md, "Bursts"; harness/measure/canary.py). A reading is two
syscalls, a few microseconds a step, on both sides alike (docs/performance.md, "Kernel
tuning").
"""
from __future__ import annotations

import resource
import time
from typing import NamedTuple

_RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", None)     # Linux only


class ThreadClock(NamedTuple):
    cpu_s: float                 # time.thread_time()
    invol: int | None            # involuntary context switches so far (None: not Linux)
    vol: int | None              # voluntary context switches so far

    def since(self, start: "ThreadClock") -> tuple[float, int | None, int | None]:
        """(CPU ms, involuntary switches, voluntary switches) from `start` to this reading."""
        def d(a: int | None, b: int | None) -> int | None:
            return None if a is None or b is None else b - a
        return ((self.cpu_s - start.cpu_s) * 1e3, d(start.invol, self.invol),
                d(start.vol, self.vol))


def thread_clock() -> ThreadClock:
    """The calling thread's clock now."""
    t = time.thread_time()
    if _RUSAGE_THREAD is None:
        return ThreadClock(t, None, None)
    ru = resource.getrusage(_RUSAGE_THREAD)
    return ThreadClock(t, ru.ru_nivcsw, ru.ru_nvcsw)
