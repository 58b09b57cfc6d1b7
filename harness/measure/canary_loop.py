"""The canary's own process (harness/measure/canary.py says what it is for): a spin loop
pinned to one CPU, stamping the end of each fixed chunk of work.

A module of its own, importing the standard library alone: the canary starts by spawn, and
the child imports the module its function lives in. From canary.py it imported torch and
numpy on the way (seconds on a GPU machine, before a run's first line)."""
from __future__ import annotations

import os
import signal
import time

CHUNK_S = 100e-6                # one chunk's work on an undisturbed machine


def _spin(n: int) -> None:
    x = 0
    for i in range(n):
        x += i


def canary_main(cpu: int, ring, count) -> None:
    """Calibrate one chunk of pure-Python work to CHUNK_S, then run chunks forever, stamping
    each end into the shared ring. It ignores SIGINT: a Ctrl-C or `timeout -s INT` reaches
    the whole process group, and the parent, which owns the canary, ends it (close, or as a
    daemon at exit); otherwise the canary printed a KeyboardInterrupt traceback into the
    run's log under "mrbench: interrupted"."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
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
    size = len(ring)
    i = 0
    while True:
        _spin(n)
        ring[i % size] = time.perf_counter()
        i += 1
        count.value = i
