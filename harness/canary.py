"""`--canary-cpu`: a spin loop on a CPU the engines do not use, timing fixed chunks of work, so
that a step slowed by the machine can be told from a step slowed by the runner.

Why: on the lent H100 (a KVM guest) the whole virtual machine runs user code about ten
times slower for ~100 ms, about once per eight ABBA waves. The engine's thread keeps the CPU
throughout (its CPU time equals its wall time: steps.csv `cpu_ms`), nothing else runs on its
CPU, and the guest's steal counter stays at zero; a sampler on another CPU was late at the
same moments. Such a burst stretches 4-7 host-bound decode steps to 5-8 ms and decides the
wave's P99 step, so the per-wave P99 ratio of two identical runners had a log standard
deviation of ~0.9 (docs/detection-power.md, "Bursts"). No statistic of the engine's own
steps can tell that from a runner that got slower; a clock outside the engines can. The
canary is that clock: a process pinned to its own CPU that does the same small piece of
work over and over and stamps each chunk's end with `time.perf_counter()`
(CLOCK_MONOTONIC, the clock every step is stamped with, in every process of the machine).
Each step row gets `machine_slow`: the slowest canary chunk that overlapped the step, as a
multiple of the canary's median chunk, so 1 means the machine ran at its usual speed.

The gate uses it (harness/compare.py): a wave in which the canary saw the machine slow on
either side is left out of the per-wave latency tests, and said so. A runner cannot slow a
spin loop on another CPU through the CPU it runs on; it could through the machine (memory
bandwidth, a host-side storm it causes), so the gate also checks that the candidate's waves
are not disturbed more often than the baseline's before it leaves any out.
"""
from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import time
from dataclasses import dataclass

import numpy as np

from mrbench.contract import BadInput

from .affinity import current_affinity, parse_cpu_list

RING = 1 << 20                  # chunk stamps kept: minutes at ~10 k chunks a second
CHUNK_S = 100e-6                # one chunk's work on an undisturbed machine
SLOW = 3.0                      # a chunk this many times its median: the machine was slowed


def _spin(n: int) -> None:
    x = 0
    for i in range(n):
        x += i


def _canary_main(cpu: int, ring, count, chunk_iters) -> None:
    """The canary's process: calibrate one chunk of pure-Python work to CHUNK_S, then run
    chunks forever, stamping each end into the shared ring."""
    os.sched_setaffinity(0, {cpu})
    n = 1000
    while True:                                  # calibrate: ~CHUNK_S a chunk
        t = time.perf_counter()
        _spin(n)
        dt = time.perf_counter() - t
        if dt > CHUNK_S / 2:
            n = max(1, int(n * CHUNK_S / dt))
            break
        n *= 2
    chunk_iters.value = n
    i = 0
    while True:
        _spin(n)
        ring[i % RING] = time.perf_counter()
        i += 1
        count.value = i


@dataclass(frozen=True)
class CanaryInfo:
    """What a result records about the canary it ran with."""

    cpu: int
    chunk_us: float               # the median chunk, measured
    slow: float                   # the multiple of it that counts as the machine slowed


class Canary:
    """The canary process and a reader of its stamps."""

    def __init__(self, cpu: int) -> None:
        ctx = mp.get_context("spawn")
        self.cpu = cpu
        self._ring = ctx.RawArray("d", RING)
        self._count = ctx.RawValue("q", 0)
        self._iters = ctx.RawValue("q", 0)
        self._proc = ctx.Process(target=_canary_main, name="mrbench-canary", daemon=True,
                                 args=(cpu, self._ring, self._count, self._iters))
        self._proc.start()
        self._median = self._settle()

    def _settle(self, seconds: float = 1.0) -> float:
        """Wait for the canary to run `seconds` and measure its median chunk."""
        deadline = time.monotonic() + 60
        while self._count.value < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._count.value < 2:
            self.close()
            raise RuntimeError(f"the canary on CPU {self.cpu} did not start within 60 s")
        time.sleep(seconds)
        stamps = self._stamps()
        return float(np.median(np.diff(stamps)))

    def _stamps(self) -> np.ndarray:
        """The stamps in the ring, oldest first (up to RING of them). The canary keeps
        writing while they are copied, so once the ring has wrapped its oldest few may have
        been overwritten by the newest: everything up to the last step back in time goes."""
        n = self._count.value
        ring = np.frombuffer(self._ring, dtype=np.float64)
        if n <= RING:
            return ring[:n].copy()
        k = n % RING
        stamps = np.concatenate([ring[k:], ring[:k]])
        back = np.flatnonzero(np.diff(stamps) < 0)
        return stamps[back[-1] + 1:] if back.size else stamps

    @property
    def info(self) -> CanaryInfo:
        return CanaryInfo(self.cpu, self._median * 1e6, SLOW)

    def machine_slow(self, t_start: np.ndarray, t_end: np.ndarray) -> np.ndarray:
        """For each interval [t_start, t_end] (perf_counter seconds), the slowest canary
        chunk that overlapped it, over the canary's median chunk; NaN where the ring holds
        no chunk that ends after the interval (too old, or the canary stopped)."""
        stamps = self._stamps()
        out = np.full(len(t_start), np.nan)
        if len(stamps) < 2 or not len(t_start):
            return out
        dur = np.diff(stamps) / self._median           # chunk j spans stamps[j]..stamps[j+1]
        # chunks overlapping [a, b]: those ending after a and starting before b
        first = np.searchsorted(stamps[1:], t_start, side="right")
        last = np.searchsorted(stamps[:-1], t_end, side="left")      # exclusive
        covered = (t_start >= stamps[0]) & (last < len(dur))
        for i in np.flatnonzero(covered):
            lo, hi = first[i], max(last[i], first[i] + 1)
            out[i] = float(dur[lo:hi].max())
        return out

    def close(self) -> None:
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(5)


_current: Canary | None = None


def start(spec: str, engine_cpus: str | None) -> Canary:
    """Start the canary on the one CPU of `spec` (once a process; later calls return it).
    Call it before `--pin-cpus` takes effect (the canary needs a CPU outside the engines'),
    with that option's value: the canary's CPU must be one this process may use and not one
    the engines will run on, or it would compete with the engines it is meant to watch."""
    global _current
    cpus = parse_cpu_list(spec)
    if len(cpus) != 1:
        raise BadInput(f"--canary-cpu {spec!r}: name one CPU, e.g. 5")
    cpu = cpus[0]
    if _current is not None:
        if _current.cpu != cpu:
            raise BadInput(f"--canary-cpu {cpu}: a canary already runs on CPU {_current.cpu}")
        return _current
    allowed = current_affinity()
    if allowed is None:
        raise BadInput("--canary-cpu needs Linux CPU affinity (sched_setaffinity), which this "
                       "platform lacks")
    if cpu not in allowed:
        raise BadInput(f"--canary-cpu {cpu}: not a CPU this process may use (allowed: "
                       f"{','.join(map(str, allowed))})")
    if engine_cpus is None:
        raise BadInput("--canary-cpu needs --pin-cpus: the engines must keep off the "
                       "canary's CPU")
    if cpu in parse_cpu_list(engine_cpus):
        raise BadInput(f"--canary-cpu {cpu} is one of the --pin-cpus {engine_cpus}: the "
                       "canary needs a CPU the engines do not use")
    _current = Canary(cpu)
    atexit.register(_current.close)
    return _current


def current() -> Canary | None:
    """The canary of this process, or None when the run has none."""
    return _current
