"""Where a median-TPOT shift lives (the step, or the host gap between steps), beside how each
side's engine started.

On a host-bound GPU step a token's time is the step plus the host gap before the next step
starts: the engine's output processing and the driver's loop (on the H100, ~0.15 ms of a
~0.6 ms token for the bundled gsm8k entry). The gate judges the step (`median_step_ms`) and
the token (`median_tpot_ms`), not the gap, so a TPOT shift without a step shift is read
here. Per run and workload, for the decode steps of each ABBA wave: the median step time,
the median gap (a step's start less the previous step's end, same side, instance and wave)
and the median TPOT; each as the Hodges-Lehmann estimate of the per-wave log ratio
(candidate / baseline) with its signed-rank 95 % CI (stats.hodges_lehmann_ci_signed_rank),
the gate's own estimator. Beside them, each side's engine start: its seconds, and what it
wrote to the kernel-compile caches (`engine_start` in the manifest since 2026-11-26,
harness.run.engines.compile_cache; "?" for older runs).

It found the cold-compile bias: the side whose engine compiled its kernels at start ran
its gap ~10 % slower for the whole run (docs/detection-power.md, "A cold compile cache").

Usage: python research/host_gap_from_runs.py DIR [DIR ...]   (runs anywhere under the DIRs)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from mrbench.contract import BadInput
from mrbench.harness.checks.stats import hodges_lehmann_ci_signed_rank
from mrbench.harness.record.results import read_manifest, read_table
from mrbench.harness.run.engines.compile_cache import describe_start

SIDES = ("candidate", "baseline")


def wave_log_ratios(steps: pd.DataFrame, requests: pd.DataFrame | None
                    ) -> dict[str, np.ndarray]:
    """{"step", "gap", "tpot": per-wave log(candidate median / baseline median)} of one
    workload's tables (decode steps only; waves where a side has no value are left out)."""
    s = steps.sort_values(["side", "instance", "wave", "t_start_s"]).copy()
    end = s["t_start_s"] + s["duration_ms"] / 1e3
    prev_end = end.groupby([s["side"], s["instance"], s["wave"]]).shift()
    s["gap_ms"] = (s["t_start_s"] - prev_end) * 1e3
    dec = s[s["kind"] != "mixed"]
    frames = {"step": (dec, "duration_ms"), "gap": (dec, "gap_ms")}
    if requests is not None and "tpot_ms" in requests:
        frames["tpot"] = (requests, "tpot_ms")
    out = {}
    for name, (df, col) in frames.items():
        med = df.groupby(["wave", "side"])[col].median().unstack()
        if not set(SIDES) <= set(med.columns):
            continue
        r = np.log(med["candidate"] / med["baseline"]).replace([np.inf, -np.inf], np.nan)
        out[name] = r.dropna().to_numpy()
    return out


def engine_starts(run: Path, workload: str) -> str:
    """Each side's engine start, from the manifest: "cand 11.4 s (wrote ...), base 5.2 s"."""
    try:
        resolved = read_manifest(run).resolved
    except (OSError, json.JSONDecodeError):
        return "?"
    parts = []
    for side in SIDES:
        r = resolved.get(workload, {}).get(side) or {}
        parts.append(f"{side[:4]} {r.get('startup_s', '?')} s "
                     f"({describe_start(r.get('engine_start'))})")
    return ", ".join(parts)


def rows(dirs: list[Path]) -> list[str]:
    runs = sorted({f.parent for d in dirs for f in d.glob("**/summary.json")})
    if not runs:
        raise BadInput(f"no run summary.json under {', '.join(map(str, dirs))}")
    lines = []
    for run in runs:
        steps = read_table(run, "steps")
        if steps is None:
            lines.append(f"{run.name}: no steps.csv")
            continue
        requests = read_table(run, "requests")
        for wid, st in steps.groupby("workload", sort=False):
            rq = None if requests is None else requests[requests["workload"] == wid]
            est = wave_log_ratios(st, rq)
            cells = []
            for name in ("step", "gap", "tpot"):
                if name not in est or not est[name].size:
                    cells.append(f"{name} -")
                    continue
                ci = hodges_lehmann_ci_signed_rank(est[name])
                pct = lambda v: 100 * np.expm1(v)  # noqa: E731
                cells.append(f"{name} {pct(ci.estimate):+5.1f} % [{pct(ci.lo):+5.1f}, "
                             f"{pct(ci.hi):+5.1f}]")
            lines.append(f"{run.name} {wid}: {'  '.join(cells)}  | {engine_starts(run, wid)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="+", type=Path)
    a = p.parse_args(argv)
    try:
        print("\n".join(rows(a.dirs)))
    except BadInput as e:
        print(f"host_gap_from_runs: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
