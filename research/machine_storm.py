"""Planted machine slowdowns with a known timetable, to check the canary (`--canary-cpu`)
end to end on a machine that has no bursts of its own: does it mark the waves that the
machine slowed, only those, and does the gate then judge the rest?

Why: the H100 we measure on (a KVM guest) has ~100 ms spells in which the whole guest runs ~10x
slower (docs/detection-power.md, "Bursts"); they decide the per-wave P99 step, and the
canary (harness/measure/canary.py) is there to mark them. Its unit tests stop the canary's own
process; this stalls the *machine*, engines and canary alike, while a real `mrbench run`
steps, and writes down when, so that the canary's marks can be scored against the truth.

    python research/machine_storm.py run --cpus 0,1 --log storm.csv [--every 3] [--burst-ms 100]
        [--seed 0] [--duration S]
    python research/machine_storm.py check storm.csv RUN_DIR [RUN_DIR ...]

`run`: one process per CPU, pinned there, at SCHED_FIFO priority 1 (every normal thread on
that CPU waits; falls back to nice -20 where real-time is not allowed). All follow one
timetable: gaps drawn from an exponential with mean --every seconds, bursts of --burst-ms
busy spin. Bursts are capped at 500 ms (the kernel's real-time throttle leaves normal
threads 5 % of each second; a longer spin would starve the machine). The timetable goes to
--log (CSV, `perf_counter` seconds, the clock every step row is stamped with), a row
flushed as each burst starts. Stop with SIGINT/SIGTERM or --duration.

`check`: for each run's steps.csv (with the canary's `machine_lost_ms` column), each
wave-side is *stormed* if a burst overlapped its steps, *marked* if the gate's rule
(canary.wave_disturbed: the machine took a whole step's time from one step) holds.
Prints the confusion table, the steps stormed and how long they took against the others,
and exits 2 where there is nothing to score.
"""
from __future__ import annotations

import argparse
import csv
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

MAX_BURST_MS = 500.0


def timetable(seed: int, every_s: float, burst_s: float, start: float, until: float
              ) -> list[tuple[float, float]]:
    """(start, end) of each burst in [start, until): exponential gaps of mean `every_s`
    between the end of one burst and the start of the next; the same seed, the same table."""
    rng = np.random.default_rng(seed)
    out, t = [], start
    while True:
        t += rng.exponential(every_s)
        if t >= until:
            return out
        out.append((t, t + burst_s))
        t += burst_s


def _stormer(cpu: int, ready, go, start, seed: int, every_s: float, burst_s: float,
             until_s: float) -> None:
    """One CPU's stormer: pinned, above every normal thread, then the shared timetable.
    It reports ready before the timetable's start is chosen, so that a slow start (a loaded
    machine, a slow import) cannot make it miss bursts."""
    os.sched_setaffinity(0, {cpu})
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except OSError:                        # no real-time here: the highest normal priority
        try:
            os.nice(-20)
        except OSError:
            pass
    parent = os.getppid()
    ready.wait()
    go.wait()                              # the parent has set `start` in between
    for t0, t1 in timetable(seed, every_s, burst_s, start.value, start.value + until_s):
        if os.getppid() != parent:         # the parent was killed: no storm without a log
            return
        now = time.perf_counter()
        if t0 > now:
            time.sleep(t0 - now)           # the scheduler wakes us at t0 (we preempt all)
        while time.perf_counter() < t1:
            pass


def run(cpus: list[int], log: Path, every_s: float, burst_ms: float, seed: int,
        duration_s: float) -> int:
    ctx = mp.get_context("spawn")
    ready, go = ctx.Barrier(len(cpus) + 1), ctx.Barrier(len(cpus) + 1)
    start_v = ctx.RawValue("d", 0.0)
    procs = [ctx.Process(target=_stormer, daemon=True,
                         args=(c, ready, go, start_v, seed, every_s, burst_ms / 1e3,
                               duration_s))
             for c in cpus]
    for p in procs:
        p.start()
    try:
        ready.wait(timeout=120)            # every stormer pinned and prioritised
    except threading.BrokenBarrierError:
        print("machine_storm: the stormers did not start within 120 s", file=sys.stderr)
        for p in procs:
            p.terminate()
        return 1
    start = start_v.value = time.perf_counter() + 0.2
    go.wait()
    table = timetable(seed, every_s, burst_ms / 1e3, start, start + duration_s)
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    with log.open("w", newline="") as f:    # a log: each row flushed as its burst begins
        w = csv.writer(f)
        w.writerow(["start_s", "end_s"])
        for t0, t1 in table:
            while not stop and time.perf_counter() < t0:
                time.sleep(min(0.2, max(0.0, t0 - time.perf_counter())))
            if stop:
                break
            w.writerow([f"{t0:.6f}", f"{t1:.6f}"])
            f.flush()
    while not stop and time.perf_counter() < start + duration_s:   # the last burst ends
        time.sleep(0.05)
    for p in procs:
        p.terminate()
        p.join()
    n = sum(1 for t0, _ in table if t0 <= time.perf_counter())
    print(f"machine_storm: {n} bursts of {burst_ms:.0f} ms on CPUs {cpus} -> {log}",
          file=sys.stderr)
    return 0


def score(table: "pd.DataFrame", steps: "pd.DataFrame") -> dict[str, float]:
    """The canary's marks (canary.wave_disturbed, the gate's rule) against the timetable,
    per wave-side and per step."""
    from mrbench.harness.measure.canary import (
        wave_disturbed,  # here: a stormer imports nothing heavy
    )
    t0 = steps["t_start_s"].to_numpy(float)
    t1 = t0 + steps["duration_ms"].to_numpy(float) / 1e3
    b0, b1 = table["start_s"].to_numpy(float), table["end_s"].to_numpy(float)
    # a step is stormed if any burst overlaps it: the last burst starting before its end
    i = np.searchsorted(b0, t1, side="left") - 1
    stormed = (i >= 0) & (b1[np.clip(i, 0, None)] > t0)
    st = steps.assign(stormed=stormed)
    rows = []
    for _, g in st.groupby(["side", "wave"]):
        rows.append((bool(g["stormed"].any()),
                     bool(wave_disturbed(g["machine_lost_ms"].to_numpy(float),
                                         g["duration_ms"].to_numpy(float)))))
    per = np.array(rows, dtype=bool).reshape(-1, 2)
    s_, m_ = per[:, 0], per[:, 1]
    dur, lost = st["duration_ms"], st["machine_lost_ms"]
    return dict(
        wave_sides=len(per),
        stormed_marked=int((s_ & m_).sum()), stormed_unmarked=int((s_ & ~m_).sum()),
        quiet_marked=int((~s_ & m_).sum()), quiet_unmarked=int((~s_ & ~m_).sum()),
        steps_stormed=int(stormed.sum()),
        median_ms_stormed=float(dur[stormed].median()) if stormed.any() else float("nan"),
        median_ms_quiet=float(dur[~stormed].median()),
        lost_ms_stormed=float(lost[stormed].median()) if stormed.any() else float("nan"),
        lost_ms_quiet_max=float(lost[~stormed].max()),
    )


def check(log: Path, dirs: list[Path]) -> int:
    import pandas as pd
    if not log.is_file():
        print(f"machine_storm check: no timetable {log}", file=sys.stderr)
        return 2
    table = pd.read_csv(log)
    runs = sorted(f for d in dirs for f in d.glob("**/steps.csv"))
    scored = 0
    for f in runs:
        steps = pd.read_csv(f)
        if "machine_lost_ms" not in steps or steps["machine_lost_ms"].isna().all():
            print(f"{f}: no canary readings (machine_lost_ms): not measured")
            continue
        s = score(table, steps.dropna(subset=["machine_lost_ms"]))
        scored += 1
        print(f"{f.parent}: {s['wave_sides']} wave-sides; stormed & marked "
              f"{s['stormed_marked']}, stormed & unmarked {s['stormed_unmarked']}, quiet & "
              f"marked {s['quiet_marked']}, quiet & unmarked {s['quiet_unmarked']}; "
              f"{s['steps_stormed']} steps stormed: median {s['median_ms_stormed']:.1f} ms "
              f"(others {s['median_ms_quiet']:.2f} ms), median lost "
              f"{s['lost_ms_stormed']:.1f} ms (others at most {s['lost_ms_quiet_max']:.2f})")
    if not scored:
        print("machine_storm check: no steps.csv with canary readings under "
              f"{', '.join(map(str, dirs))}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--cpus", required=True, help="CPUs to stall, e.g. 0,1")
    r.add_argument("--log", required=True, type=Path)
    r.add_argument("--every", type=float, default=3.0, help="mean seconds between bursts")
    r.add_argument("--burst-ms", type=float, default=100.0)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--duration", type=float, default=24 * 3600.0)
    c = sub.add_parser("check")
    c.add_argument("log", type=Path)
    c.add_argument("dirs", nargs="+", type=Path)
    a = p.parse_args(argv)
    if a.cmd == "check":
        return check(a.log, a.dirs)
    try:
        cpus = sorted({int(x) for x in a.cpus.split(",")})
    except ValueError:
        cpus = []
    allowed = os.sched_getaffinity(0)
    if not cpus or not set(cpus) <= allowed:
        print(f"machine_storm: --cpus {a.cpus!r}: give CPUs of {sorted(allowed)}", file=sys.stderr)
        return 2
    if not 0 < a.burst_ms <= MAX_BURST_MS or a.every <= 0 or a.duration <= 0:
        print(f"machine_storm: need 0 < --burst-ms <= {MAX_BURST_MS:.0f}, --every > 0, "
              "--duration > 0", file=sys.stderr)
        return 2
    return run(cpus, a.log, a.every, a.burst_ms, a.seed, a.duration)


if __name__ == "__main__":
    sys.exit(main())
