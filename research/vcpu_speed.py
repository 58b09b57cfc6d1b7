"""How fast each CPU of this machine runs the same piece of Python, alone and while a spin
loop holds another CPU.

Why: on a virtual GPU host a host-bound decode step (a `gpu-ab` step at real shape, ~2 ms of
Python) went 2x slower for whole stretches of waves while its thread kept its CPU the whole
time (steps.csv `cpu_ms` equal to `duration_ms`), and back again, sometimes within a wave.
The guest saw 16 CPUs of one thread a core, so it is not a sibling the engines can avoid.
This times a fixed loop pinned to each CPU in turn (median of REPS), then again with a spin
loop pinned to each CPU named by --spin, to show whether the CPUs differ in speed, whether
that moves from one pass to the next, and whether a busy CPU (the canary's) slows the
others (docs/detection-power.md, "CPUs of unequal speed").

Usage: python research/vcpu_speed.py [--reps 5] [--loop 300000] [--spin CPU ...]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time


def _work(n: int) -> int:
    s = 0
    for i in range(n):
        s += i * i
    return s


def cpu_ms(cpu: int, loop: int, reps: int) -> float:
    """The median time of `reps` passes of the loop, this process pinned to `cpu`."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            _work(loop)
            times.append(time.perf_counter() - t)
    finally:
        os.sched_setaffinity(0, before)
    return sorted(times)[len(times) // 2] * 1e3


def _spin(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})
    while True:
        pass


def speeds(cpus: list[int], loop: int, reps: int, spin: int | None = None) -> dict[int, float]:
    """Each CPU's time for the loop (ms), with a spin loop on `spin` (left out) or none."""
    proc = None
    if spin is not None:
        proc = mp.get_context("fork").Process(target=_spin, args=(spin,), daemon=True)
        proc.start()
        time.sleep(0.3)
    try:
        return {c: cpu_ms(c, loop, reps) for c in cpus if c != spin}
    finally:
        if proc is not None:
            proc.terminate()
            proc.join()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--loop", type=int, default=300_000)
    ap.add_argument("--spin", type=int, nargs="*", default=[])
    args = ap.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    for spin in [None, *args.spin]:
        got = speeds(cpus, args.loop, args.reps, spin)
        fast = min(got.values())
        label = "alone" if spin is None else f"spin on {spin}"
        print(f"{label:>12}: " + " ".join(f"{c}:{ms:.1f}" for c, ms in got.items())
              + f"  (slowest {max(got.values()) / fast:.2f}x the fastest)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
