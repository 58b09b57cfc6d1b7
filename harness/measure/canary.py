"""`--canary-cpu`: a spin loop on a CPU the engines do not use, timing fixed chunks of work, so
that a step slowed by the machine can be told from a step slowed by the runner.

Why: on some GPU hosts (virtual machines) the whole machine runs user code about ten times
slower for ~100 ms now and then, while the engine's thread keeps its CPU. Such a burst
stretches a few host-bound decode steps tenfold and decides the wave's P99 step
(docs/detection-power.md, "Bursts"). No statistic of the engine's own
steps can tell that from a runner that got slower; a clock outside the engines can. The
canary is that clock: a process pinned to its own CPU that does the same small piece of
work over and over and stamps each chunk's end with `time.perf_counter()`
(CLOCK_MONOTONIC, the clock every step is stamped with, in every process of the machine).
Each step row gets `machine_lost_ms`: the part of the step the machine took away, i.e. the
time within the step that fell in canary chunks at least SLOW times the usual chunk, less
those chunks' usual time (a chunk 10x slow counts 90 % of its time as lost, a full stall
all of it). A wave-side is disturbed (`wave_disturbed`) when one of its steps lost at least
the side's median step in that wave (and MIN_LOST_MS): the machine added a whole step.

Why lost time and not the slowest chunk: the slowest of many chunks grows with the
interval, so on a noisy machine a long step (a prefill of 280 ms on CPU) always holds a
chunk 3x the median, and a slowest-chunk rule marks every wave of an A/A run even on a quiet
machine (research/machine_storm.py); it also counts a 0.3 ms hiccup the same as a 100 ms
stall. Time lost is what a stall adds to a step.

The gate uses it (harness/checks/latency.py): a wave in which the canary saw the machine take a
step's worth of time on either side is left out of the per-wave latency tests, and said
so. A runner cannot slow a spin loop on another CPU through the CPU it runs on; it could
through the machine (memory bandwidth, a host-side storm it causes), so the gate also
checks that the candidate's waves are not disturbed more often than the baseline's before
it leaves any out.
"""
from __future__ import annotations

import atexit
import multiprocessing as mp
import time
from dataclasses import dataclass

import numpy as np

from mrbench.contract import BadInput

from .affinity import current_affinity, parse_cpu_list
from .canary_loop import canary_main

RING = 1 << 20                  # chunk stamps kept: minutes at ~10 k chunks a second
SLOW = 3.0                      # a chunk this many times its median: the machine was slowed
MIN_LOST_MS = 1.0               # less lost time is a tick's jitter, on the canary's CPU alone


@dataclass(frozen=True)
class CanaryInfo:
    """What a result records about the canary it ran with."""

    cpu: int
    chunk_us: float               # the median chunk, measured
    slow: float                   # the multiple of it that counts as the machine slowed
    min_lost_ms: float            # a wave-side is disturbed from this much lost time up


class Canary:
    """The canary process and a reader of its stamps."""

    def __init__(self, cpu: int) -> None:
        ctx = mp.get_context("spawn")
        self.cpu = cpu
        self._ring = ctx.RawArray("d", RING)
        self._count = ctx.RawValue("q", 0)
        self._proc = ctx.Process(target=canary_main, name="mrbench-canary", daemon=True,
                                 args=(cpu, self._ring, self._count))
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
        return CanaryInfo(self.cpu, self._median * 1e6, SLOW, MIN_LOST_MS)

    def machine_lost_ms(self, t_start: np.ndarray, t_end: np.ndarray) -> np.ndarray:
        """For each interval [t_start, t_end] (perf_counter seconds), the milliseconds of it
        the machine took away: its overlap with each canary chunk at least SLOW times the
        median chunk, times the share of that chunk beyond its usual time (1 - median /
        chunk). NaN where the ring holds no chunk that ends after the interval (too old, or
        the canary stopped) or none before it."""
        stamps = self._stamps()
        out = np.full(len(t_start), np.nan)
        if len(stamps) < 2 or not len(t_start):
            return out
        covered = (t_start >= stamps[0]) & (t_end <= stamps[-1])
        out[covered] = 0.0
        dur = np.diff(stamps)
        slow = np.flatnonzero(dur >= SLOW * self._median)        # few: the rest lose nothing
        if not slow.size:
            return out
        lo_s, hi_s = stamps[slow], stamps[slow + 1]              # disjoint, in time order
        share = 1.0 - self._median / dur[slow]
        first = np.searchsorted(hi_s, t_start, side="right")     # slow chunks ending after a
        last = np.searchsorted(lo_s, t_end, side="left")         # ... and starting before b
        for i in np.flatnonzero(covered & (last > first)):
            k = slice(first[i], last[i])
            overlap = np.minimum(hi_s[k], t_end[i]) - np.maximum(lo_s[k], t_start[i])
            out[i] = float(np.sum(np.clip(overlap, 0, None) * share[k]) * 1e3)
        return out

    def close(self) -> None:
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(5)


def wave_disturbed(lost_ms: np.ndarray, duration_ms: np.ndarray) -> bool | None:
    """Whether the machine took a whole step's time from one step of a wave-side: the most
    any step lost is at least the side's median step in that wave, and MIN_LOST_MS. None
    when the canary has no reading for any of its steps. One rule for the gate and every
    script that reads steps.csv."""
    lost = np.asarray(lost_ms, dtype=float)
    if not lost.size or np.isnan(lost).all():
        return None
    return bool(np.nanmax(lost) >= max(float(np.median(duration_ms)), MIN_LOST_MS))


# On a CPU engine, the step's own thread clock is a second witness that needs no spare CPU:
# the bundled runner's step thread is on its CPU for all of a step (steps.csv `cpu_ms` over
# `duration_ms`), so time off it is time the machine gave to other work (a host that stole
# the vCPU, another process). It does not see a CPU that runs slow (bursts keep the thread
# on its CPU), and on a GPU the host legitimately waits for the device, so the gate reads it
# on CPU engines only. Above MAX_OFF_CPU the comparison says what the machine did, not the
# runners (the shares measured in quiet and busy runs: docs/detection-power.md, "A machine
# busy with other work").
MAX_OFF_CPU = 0.25


def off_cpu_share(steps: list[dict]) -> float | None:
    """The share of a side's timed steps' wall time its step thread spent off its CPU
    (sum of max(0, duration - cpu) over sum of duration, the steps of a wave); None without
    thread clock readings."""
    dur = off = 0.0
    for r in steps:
        d, c = r.get("duration_ms"), r.get("cpu_ms")
        if r.get("wave") is None or d is None or c is None or c != c:
            continue
        dur += float(d)
        off += max(0.0, float(d) - float(c))
    return off / dur if dur > 0 else None


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
