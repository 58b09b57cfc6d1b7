"""Does an A/A bias follow the order the engines were built in? A/A runs split by build order.

In an A/A run (the same runner on both sides) nothing but the harness tells the sides
apart, and the harness builds one side's engine first (`--build-first`, candidate by
default). If the clean runs' estimates lean one way, this reads runs made with each order
(e.g. `scripts/gpu/runs_until.sh OUT TAG 575 clean,clean@baseline`) and says, per latency
metric, where each order's estimates centre and whether the two orders differ (Welch t on
the per-run relative estimates, stats.mean_diff_welch). A bias that follows build order
flips sign with it; a bias of the machine or session does not.

The order is read from each run's manifest (`isolation.build_first`); runs made before it
was recorded built the candidate's engine first. Runs with candidate faults are refused.

Usage: python research/build_order_from_runs.py SUITE DIR [DIR ...] [--waves N] [--plot PNG]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from mrbench.contract import BadInput
from mrbench.harness.campaigns.read_back import clean_runs_only, finished_runs
from mrbench.harness.checks.regate import first_waves
from mrbench.harness.checks.stats import mean_diff_welch
from mrbench.harness.record.results import read_manifest
from mrbench.harness.record.run_record import RunSummary, Verdict
from mrbench.harness.record.suite import load_suite

ORDERS = ("candidate", "baseline")


def build_first(run: Path) -> str:
    """Whose engine the run built first (older runs, without the record: the candidate's)."""
    try:
        manifest = read_manifest(run)
    except (OSError, json.JSONDecodeError) as e:
        raise BadInput(f"{run}: no readable manifest.json ({e})") from None
    return (manifest.isolation or {}).get("build_first", "candidate")


def estimates(runs: list[tuple[Path, RunSummary]]
              ) -> dict[str, dict[str, list[tuple[float, bool]]]]:
    """{metric: {order: [(relative estimate, judged a regression), ...]}} over the runs'
    latency checks that carry an estimate."""
    out: dict[str, dict[str, list[tuple[float, bool]]]] = {}
    for run, summary in runs:
        order = build_first(run)
        for c in summary.checks:
            if c.metric.endswith("_ms") and c.delta is not None:
                key = f"{c.workload}/{c.metric}"
                out.setdefault(key, {o: [] for o in ORDERS})[order].append(
                    (c.delta, c.verdict == Verdict.REGRESSION))
    return out


def table(est: dict) -> list[str]:
    """One line per metric and order, and the difference of the orders."""
    lines = []
    for key, by in sorted(est.items()):
        x = {o: np.array([d for d, _ in by[o]]) * 100 for o in ORDERS}
        for o in ORDERS:
            v = x[o]
            if not v.size:
                lines.append(f"{key:32s} {o:>9s} first:  no runs")
                continue
            se = v.std(ddof=1) / np.sqrt(v.size) if v.size > 1 else float("nan")
            alarms = sum(r for _, r in by[o])
            lines.append(f"{key:32s} {o:>9s} first: {v.size:3d} runs  mean {v.mean():+6.2f} % "
                         f"(se {se:.2f})  above 0: {(v > 0).sum()}/{v.size}  "
                         f"false alarms {alarms}/{v.size}")
        ci, t = mean_diff_welch(x["candidate"], x["baseline"])
        lines.append(f"{key:32s} candidate-first minus baseline-first: {ci.estimate:+.2f} % "
                     f"[{ci.lo:+.2f}, {ci.hi:+.2f}] ({ci.level:.0%}), p = {t.p_value:.2g} "
                     f"({t.method})")
    return lines


def plot(est: dict, path: Path) -> None:
    """Each run's estimate, one panel per metric, the two orders side by side."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = sorted(est)
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3.4), squeeze=False)
    rng = np.random.default_rng(0)                  # jitter only, the same each time
    for ax, key in zip(axes[0], keys):
        for i, o in enumerate(ORDERS):
            v = np.array([d for d, _ in est[key][o]]) * 100
            ax.scatter(i + rng.uniform(-0.12, 0.12, v.size), v, s=14, alpha=0.7)
            if v.size:
                ax.hlines(v.mean(), i - 0.25, i + 0.25, color="k")
        ax.axhline(0, color="grey", lw=0.6)
        ax.set_xticks(range(len(ORDERS)), [f"{o}\nfirst" for o in ORDERS])
        ax.set_xlim(-0.6, len(ORDERS) - 0.4)
        ax.set_title(key.split("/")[-1], fontsize=9)
        ax.set_ylabel("A/A estimate, candidate vs baseline (%)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("suite")
    p.add_argument("dirs", nargs="+", type=Path)
    p.add_argument("--waves", type=int, metavar="N",
                   help="judge each run on its first N waves alone (harness.regate.first_waves)")
    p.add_argument("--plot", type=Path, metavar="PNG", help="draw each run's estimate here")
    a = p.parse_args(argv)
    try:
        suite = load_suite(a.suite)
        found = clean_runs_only(finished_runs(a.dirs, suite))
        if a.waves is not None:
            found = [(d, first_waves(d, a.waves)) for d, _ in found]
        est = estimates(found)
    except BadInput as e:
        print(f"build_order_from_runs: {e}", file=sys.stderr)
        return 2
    print("\n".join(table(est)))
    if a.plot:
        plot(est, a.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
