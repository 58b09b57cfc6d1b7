"""`mrbench calibrate`: A/A, the suite N times with no change; false alarms per check. With
--from-runs, the same judgement of finished runs (a campaign cut off, or run in pieces)."""
from __future__ import annotations

import argparse
from pathlib import Path

from mrbench.contract import BadInput

from ..campaigns.calibrate import calibrate, fmt_rate
from ..campaigns.read_back import read_back_calibration
from ..record.errors import EXIT_PASS, EXIT_REGRESSION, EXIT_RUN_FAILED
from ..record.results import default_out
from ..record.study_record import Calibration
from ..show.formatting import fmt_exceedance, fmt_heterogeneity, fmt_projected_mde
from . import studies
from .common import isolation_of, render_campaign_reports, suite_and_sides

DEFAULT_RUNS = 10


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`mrbench calibrate` and its options."""
    k = studies.add_study_parser(sub, "calibrate",
                                 "A/A: the suite N times with no change; false alarms",
                                 "number of runs (default 10)")
    k.add_argument("--max-rate", type=float, default=0.10,
                   help="exit 1 if any check's false-alarm rate is above this (default 0.10)")
    studies.from_runs_options(k, "calibration.json")
    return k


def main(a: argparse.Namespace) -> int:
    if not 0 <= a.max_rate <= 1:
        raise BadInput(f"--max-rate must be in [0, 1], got {a.max_rate}")
    studies.check_from_runs(a, {"-n": a.n})
    if a.from_runs is not None:     # a calibration time-limited jobs cut off or ran in pieces
        return _finish(a, *studies.read_back(a, "calibrate", read_back_calibration))
    n = studies.runs_count(a, DEFAULT_RUNS)
    suite, base, cand, overrides = suite_and_sides(a)
    out = a.out or default_out(f"calibrate-{suite.name}")
    res, path = calibrate(suite, base, cand, n, overrides, out, isolation=isolation_of(a))
    render_campaign_reports(path, "calibrate", res)
    return _finish(a, res, path)


def _finish(a: argparse.Namespace, res: Calibration, path: Path | None) -> int:
    """Print the result (table or --json) and give the exit code: 3 when a run erred, 1
    when a check's false-alarm rate is above --max-rate."""
    studies.print_study(a, res, path, print_calibration)
    if res.errors:
        return EXIT_RUN_FAILED
    return EXIT_PASS if res.max_rate <= a.max_rate else EXIT_REGRESSION


def print_calibration(res: Calibration) -> None:
    """calibration.json's table: per check, the false alarms, the A/A spread of its delta
    and, for a latency check judged with a CI, the projected MDE."""
    print(f"candidate {res.candidate} vs baseline {res.baseline}, {res.n} runs of "
          f"{res.suite}")
    w = max((len(k) for k in res.checks), default=10)
    for name, c in res.checks.items():
        spread = "" if c.delta_max is None else \
            f"  delta {c.delta_min:+.3g}..{c.delta_max:+.3g}"
        mde = f"  projected MDE {fmt_projected_mde(c.projection)}" if c.projection else ""
        if not c.judged:                 # reported as info in every run: nothing judged
            print(f"{name:<{w}}  not judged in any run (reported only)")
            continue
        print(f"{name:<{w}}  false alarms {fmt_rate(c)}{spread}{mde}")
    for line in fmt_heterogeneity(res.checks) + fmt_exceedance(res.checks):
        print(line)
