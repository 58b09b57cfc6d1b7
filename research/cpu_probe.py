"""Who else runs on the engines' CPU: a sampler to run beside a pinned GPU run.

Why: on the H100 we measure on the bundled decode step (~0.5 ms of host Python, pinned to one CPU)
has bursts of 5-8 ms steps lasting tens of milliseconds, about once per eight ABBA waves,
and they decide the per-wave P99 (docs/detection-power.md, "Bursts"). A step's own clocks
(steps.csv `cpu_ms`, `invol_switches`, `vol_switches`) say whether the engine's thread was
off the CPU; this says what had it: every PERIOD seconds it records, stamped with
`time.perf_counter()` (CLOCK_MONOTONIC, the clock steps.csv uses), the CPU's /proc/stat
line (user .. steal: a hypervisor's steal shows there), its interrupt count, and the CPU
time of every thread that may run on that CPU (kernel per-CPU threads included), so a burst
can be matched to the thread that ran in it.

Usage: python research/cpu_probe.py CPU OUT.jsonl [--period 0.05]; stop it with SIGTERM
or SIGINT. Run it on another CPU (`taskset -c 0 python ...`) so it is not the neighbour.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path


def cpu_stat(cpu: int) -> list[int]:
    """/proc/stat's jiffies for one CPU: user nice system idle iowait irq softirq steal."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{cpu} "):
            return [int(x) for x in line.split()[1:9]]
    raise SystemExit(f"cpu_probe: no cpu{cpu} in /proc/stat")


def interrupts(cpu: int) -> int:
    """Interrupts served by `cpu` so far (the sum of its /proc/interrupts column)."""
    lines = Path("/proc/interrupts").read_text().splitlines()
    col = lines[0].split().index(f"CPU{cpu}")
    total = 0
    for line in lines[1:]:
        parts = line.split()
        if len(parts) > col + 1 and parts[col + 1].isdigit():
            total += int(parts[col + 1])
    return total


def threads_on(cpu: int) -> dict[str, list]:
    """tid -> [process name, thread name, utime+stime ticks, last CPU] for every thread whose
    affinity includes `cpu`."""
    out = {}
    for pdir in Path("/proc").iterdir():
        if not pdir.name.isdigit():
            continue
        try:
            pname = (pdir / "comm").read_text().strip()
            for tdir in (pdir / "task").iterdir():
                st = (tdir / "stat").read_text()
                rest = st[st.rindex(")") + 2:].split()
                tid = int(tdir.name)
                if cpu not in os.sched_getaffinity(tid):
                    continue
                tname = st[st.index("(") + 1:st.rindex(")")]
                out[tdir.name] = [pname, tname, int(rest[11]) + int(rest[12]), int(rest[36])]
        except (OSError, ValueError, IndexError):
            continue          # a thread or process that ended while being read
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cpu", type=int)
    p.add_argument("out", type=Path)
    p.add_argument("--period", type=float, default=0.05)
    a = p.parse_args(argv)
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    prev: dict[str, list] = {}
    with a.out.open("w") as f:
        f.write(json.dumps(dict(cpu=a.cpu, hz=os.sysconf("SC_CLK_TCK"), period=a.period,
                                fields="user nice system idle iowait irq softirq steal"))
                + "\n")
        while not stop:
            t = time.perf_counter()
            cur = threads_on(a.cpu)
            ran = {tid: [v[0], v[1], v[2] - prev[tid][2], v[3]] for tid, v in cur.items()
                   if tid in prev and v[2] > prev[tid][2]}
            new = [tid for tid in cur if tid not in prev]
            f.write(json.dumps(dict(t=t, stat=cpu_stat(a.cpu), irq=interrupts(a.cpu),
                                    ran=ran, new={k: cur[k][:2] for k in new} if prev else {},
                                    n_threads=len(cur))) + "\n")
            f.flush()
            prev = cur
            time.sleep(max(0.0, a.period - (time.perf_counter() - t)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
