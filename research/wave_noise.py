"""Where a run's latency noise comes from: the anatomy behind docs/detection-power.md's
"Noise anatomy" (H100, 2026-11-25).

For each run directory (a `run`, or a campaign's run-NN, also inside a cut-off campaign's
hidden directory) it reads steps.csv and prints, per workload, over the uniform-decode
steps:
- `wave_sd`: the standard deviation of the per-wave log ratio of median step times
  (candidate over baseline), the quantity the blocked median test sees. Its square over the
  number of waves is the test's variance, so it sets the MDE.
- `order`: the mean log ratio of the side that ran second in a wave over the one that ran
  first (a run-order cost; ABBA cancels it in the mean, not in the spread).
- `ac1`, `ac10`, `ac50`: the autocorrelation of a side's log step time (less its batch
  size's median) at lags of 1, 10 and 50 steps: how slowly the machine's speed wanders.
- with --smi SMI.csv --clock CLOCK.txt (research/noise_study.sh writes both): the GPU SM
  clock range and utilisation seen during the steps, to tell GPU clocking from host speed.

Usage: python research/wave_noise.py RUN_DIR... [--smi smi.csv --clock clock.txt]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from mrbench.harness.record.results import read_table


def _autocorr(x: np.ndarray, lag: int) -> float:
    if len(x) <= lag + 2:
        return float("nan")
    return float(np.corrcoef(x[:-lag], x[lag:])[0, 1])


def wave_noise(steps: pd.DataFrame) -> dict[str, float]:
    """The noise figures of one workload's steps (rows of steps.csv, both sides)."""
    s = steps[steps["kind"] == "uniform_decode"]
    med = s.groupby(["wave", "side"])["duration_ms"].median().unstack()
    lr = np.log(med["candidate"] / med["baseline"])
    first = s.groupby(["wave", "side"])["wave_pos"].first().unstack()["candidate"] == 0
    second_over_first = np.where(first, -lr, lr)     # candidate first: baseline / candidate
    resid = np.log(s["duration_ms"]) - s.groupby(["side", "wave", "num_reqs"])[
        "duration_ms"].transform(lambda v: np.log(np.median(v)))
    ac = {lag: [] for lag in (1, 10, 50)}
    for _, g in s.assign(resid=resid).groupby(["wave", "side"]):
        x = g.sort_values("t_start_s")["resid"].to_numpy()
        for lag in ac:
            ac[lag].append(_autocorr(x, lag))
    return dict(waves=len(lr), wave_sd=float(lr.std()), mean_log_ratio=float(lr.mean()),
                order=float(np.mean(second_over_first)),
                **{f"ac{lag}": float(np.nanmean(v)) for lag, v in ac.items()})


def gpu_state(steps: pd.DataFrame, smi: Path, clock: Path) -> dict[str, float]:
    """SM clock and utilisation (nvidia-smi, 50 ms samples) at each step's start; the two
    clocks are joined by the instant clock.txt holds on both (wall, perf_counter)."""
    wall0, pc0 = map(float, clock.read_text().split())
    cols = ["ts", "sm", "mem", "power", "util", "temp", "reasons"]
    d = pd.read_csv(smi, header=None, names=cols, skipinitialspace=True)
    t = (pd.to_datetime(d["ts"], format="%Y/%m/%d %H:%M:%S.%f")
         - pd.Timestamp("1970-01-01")).dt.total_seconds()
    pc = (t - wall0 + pc0).to_numpy()
    i = np.searchsorted(pc, steps["t_start_s"].to_numpy()) - 1
    i = i[(i >= 0) & (i < len(d))]
    if not len(i):
        return {}
    sm, util = d["sm"].to_numpy()[i], d["util"].to_numpy()[i]
    return dict(sm_min=float(sm.min()), sm_max=float(sm.max()), util_median=float(np.median(util)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--smi", type=Path)
    p.add_argument("--clock", type=Path)
    a = p.parse_args(argv)
    if (a.smi is None) != (a.clock is None):
        print("wave_noise: --smi and --clock go together", file=sys.stderr)
        return 2
    rows = []
    for run in a.runs:
        steps = read_table(run, "steps")
        if steps is None:
            print(f"wave_noise: {run} has no step table (steps.csv)", file=sys.stderr)
            return 2
        for wl, g in steps.groupby("workload"):
            row = dict(run=str(run), workload=wl, **wave_noise(g))
            if a.smi:
                row.update(gpu_state(g, a.smi, a.clock))
            rows.append(row)
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.round(3).to_string(index=False))
        print(table.groupby("workload")[["wave_sd", "order", "ac1", "ac10", "ac50"]]
              .mean().round(3).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
