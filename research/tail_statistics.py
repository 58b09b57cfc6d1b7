"""Which tail statistic of the step time could meet the P99 goal: alternatives judged offline
on stored runs, next to the gate's own per-wave P99.

The gate judges `p99_step_ms` per ABBA wave (each wave's P99 ratio, signed-rank over the
waves). With ~200 steps a wave a per-wave P99 is about the 2nd-largest step, so it is
noisy. This re-judges the same runs' `steps.csv` with other statistics, each with the gate's
own machinery (harness.stats) and bar, and tallies, per plan (clean, or the candidate's
slow-step size), how often each flagged and what it estimated:
- `wave P99`: the gate's test (per-wave P99 log ratios, Wilcoxon signed-rank, HL estimate);
- `wave P99 (Harrell-Davis)`: the same test on each wave's Harrell-Davis P99 (a weighted
  mean of all order statistics, scipy.stats.mstats.hdquantiles);
- `wave P90`, `wave P95`: the same test on a lower quantile;
- `pooled P99 (wave bootstrap)`: one P99 over all steps a side, CI by resampling whole
  waves (stats_bootstrap.ratio_percentile_ci_wave_bootstrap), decided by the CI's lower bound;
- `wave P99, every wave` and `wave P99, canary-quiet waves`: the gate's test with and
  without the waves in which the canary (`--canary-cpu`, harness/measure/canary.py) saw the machine
  take a whole step's time on either side; runs without the canary's `machine_lost_ms`
  column are "not measured" there. (With a canary the gate itself leaves those waves
  out, so its own row is the second.)
- `decode: ...`: the wave P99 of the decode steps alone. A wave of the H100's gsm8k entry
  has ~215 decode steps of ~1 ms and 2 prefills of 5-26 ms: the plain P99 is a decode
  step, while the Harrell-Davis weights reach the two prefills, so over all steps it
  measures mostly them (docs/notes/gpu-quick-gate-studies.md, "The canary on the H100").
A clean run's flag is a false alarm; a ruler run's a detection. Judged on the same runs
that suggest it, so a winner here still needs its own A/A and ruler study.

`--pool-waves N` also asks what N waves a run would buy: per plan, each run's canary-quiet
per-wave P99 log ratios are joined with the next runs' (in order, wrapping around) and cut
to N waves, then judged with the gate's test; the clean windows also give the shift-model
projection (stats_across_runs.shifted_detection_aa). Windows share runs, so the rates are indications,
not independent runs. It assumes runs are exchangeable (no effect of a run's own; see
`calibrate`'s Cochran's Q).

Usage: python research/tail_statistics.py [--bar 0.05] [--alpha 0.05] [--pool-waves N]
RUN_DIR [RUN_DIR ...] (each RUN_DIR holds finished runs: summary.json and steps.csv, e.g. a
power study's pieces)
"""
from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats.mstats import hdquantiles

from mrbench.contract import BadInput
from mrbench.harness.checks import stats, stats_across_runs, stats_bootstrap
from mrbench.harness.measure.canary import wave_disturbed
from mrbench.harness.record.results import read_record, read_table
from mrbench.harness.record.run_record import RunSummary

MIN_WAVES = 6


def _hd(x: np.ndarray, q: float) -> float:
    """Harrell-Davis estimate of the q-th percentile: a Beta-weighted mean of all order
    statistics, steadier than one or two of them for a tail quantile of a small sample."""
    return float(hdquantiles(x, prob=[q / 100])[0])


def _log_ratios(bw: dict, cw: dict, q: float, quantile=np.percentile,
                leave_out: set[int] | frozenset[int] = frozenset()) -> np.ndarray:
    """Per shared wave (less `leave_out`), log(candidate's q-th quantile / baseline's)."""
    waves = [w for w in sorted(set(bw) & set(cw)) if w not in leave_out]
    return np.log([quantile(cw[w], q) / quantile(bw[w], q) for w in waves])


def _blocked(bw: dict, cw: dict, q: float, bar: float, alpha: float,
             quantile=np.percentile) -> tuple[float, bool]:
    logr = _log_ratios(bw, cw, q, quantile)
    hl = stats.hodges_lehmann_ci_signed_rank(logr, level=1 - 2 * alpha)
    p = stats.wilcoxon_signed_rank(logr, alternative="greater").p_value
    rel = math.expm1(hl.estimate)
    return rel, bool(p < alpha and rel > bar)


def _pooled(bw: dict, cw: dict, q: float, bar: float, alpha: float) -> tuple[float, bool]:
    waves = sorted(set(bw) & set(cw))
    ci = stats_bootstrap.ratio_percentile_ci_wave_bootstrap([bw[w] for w in waves],
                                                  [cw[w] for w in waves], q,
                                                  level=1 - 2 * alpha, n_boot=1000)
    return ci.estimate, bool(ci.lo > 0 and ci.estimate > bar)


STATISTICS = {
    "wave P99 (the gate)": lambda b, c, bar, a: _blocked(b, c, 99, bar, a),
    "wave P99 (Harrell-Davis)": lambda b, c, bar, a: _blocked(b, c, 99, bar, a, _hd),
    "wave P95": lambda b, c, bar, a: _blocked(b, c, 95, bar, a),
    "wave P90": lambda b, c, bar, a: _blocked(b, c, 90, bar, a),
    "pooled P99 (wave bootstrap)": lambda b, c, bar, a: _pooled(b, c, 99, bar, a),
}


def _quiet(bw: dict, cw: dict, slow: dict | None, bar: float, alpha: float
           ) -> tuple[float, bool] | None:
    if slow is None:
        return None
    keep = [w for w in sorted(set(bw) & set(cw)) if w not in slow]
    if len(keep) < MIN_WAVES:
        return None
    return _blocked({w: bw[w] for w in keep}, {w: cw[w] for w in keep}, 99, bar, alpha)


def plan_of(summary: RunSummary) -> str:
    faults = summary.candidate_faults
    return "clean" if not faults else ",".join(faults)


def disturbed_waves(steps: pd.DataFrame) -> set[int] | None:
    """Waves in which the canary saw the machine take a whole step's time on either side
    (canary.wave_disturbed, the gate's rule); None: no canary readings."""
    if "machine_lost_ms" not in steps or steps["machine_lost_ms"].isna().all():
        return None
    return {int(w) for (_, w), g in steps.groupby(["side", "wave"])
            if wave_disturbed(g["machine_lost_ms"].to_numpy(float),
                              g["duration_ms"].to_numpy(float))}


def _per_wave(steps: pd.DataFrame) -> dict[str, dict[int, np.ndarray]]:
    return {side: {int(w): g["duration_ms"].to_numpy(float) for w, g in df.groupby("wave")}
            for side, df in steps.groupby("side")}


def _read_steps(run: Path) -> pd.DataFrame:
    steps = read_table(run, "steps")
    if steps is None:
        raise BadInput(f"{run}: no step table (steps.csv)")
    return steps[[c for c in ("side", "wave", "duration_ms", "machine_lost_ms", "kind")
                  if c in steps.columns]]


def judge_run(run: Path, bar: float, alpha: float) -> dict[str, tuple[float, bool] | None]:
    """Each statistic's (estimate, flagged) on one run; None where it measured nothing."""
    steps = _read_steps(run)
    per = _per_wave(steps)
    if len(set(per.get("baseline", {})) & set(per.get("candidate", {}))) < MIN_WAVES:
        raise ValueError(f"{run}: fewer than {MIN_WAVES} shared waves")
    out = {name: f(per["baseline"], per["candidate"], bar, alpha)
           for name, f in STATISTICS.items()}
    if "kind" in steps:                # a decode-heavy wave's few prefills weigh in a
        dec = _per_wave(steps[steps["kind"] != "mixed"])   # weighted tail estimate
        out["decode: wave P99"] = _blocked(dec["baseline"], dec["candidate"], 99, bar, alpha)
        out["decode: wave P99 (Harrell-Davis)"] = _blocked(
            dec["baseline"], dec["candidate"], 99, bar, alpha, _hd)
    out["wave P99, every wave"] = _blocked(per["baseline"], per["candidate"], 99, bar, alpha)
    out["wave P99, canary-quiet waves"] = _quiet(per["baseline"], per["candidate"],
                                                 disturbed_waves(steps), bar, alpha)
    return out


def quiet_p99_log_ratios(steps: pd.DataFrame, decode: bool = False) -> np.ndarray:
    """One run's per-wave P99 log ratios (candidate over baseline) over the waves the
    canary left quiet (all waves without a canary); `decode`: of the decode steps alone."""
    out = disturbed_waves(steps) or set()
    if decode and "kind" in steps:
        steps = steps[steps["kind"] != "mixed"]
    per = _per_wave(steps)
    return _log_ratios(per["baseline"], per["candidate"], 99, leave_out=out)


SHIFTS = (0.05, 0.076, 0.10)


def pooled_waves(ratios: list[np.ndarray], n: int, bar: float, alpha: float
                 ) -> list[tuple[float, float, bool]] | None:
    """Per run, the gate's test on its log ratios joined with the next runs' (wrapping
    around) and cut to n waves: (estimate, CI lower bound, flagged). None: the runs hold
    fewer than n waves together."""
    if sum(len(r) for r in ratios) < n:
        return None
    out = []
    for i in range(len(ratios)):
        joined, j = [], i
        while sum(map(len, joined)) < n:
            joined.append(ratios[j % len(ratios)])
            j += 1
        hl = stats.hodges_lehmann_ci_signed_rank(np.concatenate(joined)[:n], level=1 - 2 * alpha)
        est, lo = math.expm1(hl.estimate), math.expm1(hl.lo)
        out.append((est, lo, bool(lo > 0 and est > bar)))
    return out


def print_pooled(runs: list[tuple[Path, str]], n: int, bar: float, alpha: float) -> None:
    """The --pool-waves table: per statistic and plan, flagged windows of n waves."""
    plans = sorted({pl for _, pl in runs}, key=lambda s: (s != "clean", s))
    steps = {r: _read_steps(r) for r, _ in runs}
    print(f"\nruns joined to {n} waves (windows share runs: indications, not independent runs)")
    for decode in (False, True):
        name = f"{'decode: ' if decode else ''}wave P99, canary-quiet waves"
        cells = []
        for pl in plans:
            res = pooled_waves([quiet_p99_log_ratios(steps[r], decode)
                                for r, p in runs if p == pl], n, bar, alpha)
            if res is None:
                cells.append(f"{pl}: not measured (fewer than {n} waves)")
                continue
            est = np.median([e for e, _, _ in res])
            cell = f"{pl}: {sum(f for *_, f in res)}/{len(res)} ({est:+.1%})"
            if pl == "clean":
                d, lo = [e for e, _, _ in res], [x for _, x, _ in res]
                cell += " projected " + ", ".join(
                    f"+{s:.1%}: {stats_across_runs.shifted_detection_aa(d, lo, s, bar):.0%}" for s in SHIFTS)
            cells.append(cell)
        print(f"{name:<38}" + "; ".join(cells))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="+", type=Path)
    p.add_argument("--bar", type=float, default=0.05, help="relative bar (gpu-quick: 0.05)")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--pool-waves", type=int, metavar="N",
                   help="also judge each plan's runs joined end to end, N waves a window")
    a = p.parse_args(argv)
    if a.pool_waves is not None and a.pool_waves < 6:
        print(f"tail_statistics: --pool-waves must be >= 6, got {a.pool_waves}",
              file=sys.stderr)
        return 2
    runs = sorted({f.parent for d in a.dirs for f in d.glob("**/steps.csv")
                   if (f.parent / "summary.json").is_file()})
    if not runs:
        print(f"tail_statistics: no run with steps.csv and summary.json under "
              f"{', '.join(map(str, a.dirs))}", file=sys.stderr)
        return 2
    tally: dict[tuple[str, str], list[tuple[float, bool]]] = defaultdict(list)
    judged: list[tuple[Path, str]] = []
    for i, run in enumerate(runs, 1):
        plan = plan_of(read_record(run)[1])
        print(f"[{i}/{len(runs)}] {run} ({plan})", file=sys.stderr, flush=True)
        try:
            for name, res in judge_run(run, a.bar, a.alpha).items():
                if res is not None:
                    tally[(plan, name)].append(res)
            judged.append((run, plan))
        except (ValueError, KeyError) as e:
            print(f"  skipped: {e}", file=sys.stderr)
    plans = sorted({k[0] for k in tally}, key=lambda s: (s != "clean", s))
    print(f"bar +{a.bar:.0%}, alpha {a.alpha}; per plan: flagged/runs (median estimate)")
    print(f"{'statistic':<34}" + "".join(f"{pl:>22}" for pl in plans))
    for name in [*STATISTICS, "decode: wave P99", "decode: wave P99 (Harrell-Davis)",
                 "wave P99, every wave", "wave P99, canary-quiet waves"]:
        cells = []
        for pl in plans:
            res = tally.get((pl, name), [])
            if not res:
                cells.append("not measured")
                continue
            hits = sum(f for _, f in res)
            est = np.median([e for e, _ in res]) if res else float("nan")
            cells.append(f"{hits}/{len(res)} ({est:+.1%})")
        print(f"{name:<34}" + "".join(f"{c:>22}" for c in cells))
    if a.pool_waves:
        print_pooled(judged, a.pool_waves, a.bar, a.alpha)
    return 0


if __name__ == "__main__":
    sys.exit(main())
