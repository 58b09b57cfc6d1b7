"""`mrbench calibrate`: A/A, the suite N times with no change; false alarms per check. With
--from-runs, the same judgement of finished runs (a campaign cut off, or run in pieces)."""
from __future__ import annotations

import argparse
from pathlib import Path

from mrbench.contract import BadInput

from ..campaigns.campaign import calibrate, fmt_rate, read_back_calibration
from ..record.errors import EXIT_PASS, EXIT_REGRESSION, EXIT_RUN_FAILED
from ..record.results import default_out
from ..record.study_record import Calibration
from ..show.formatting import fmt_exceedance, fmt_heterogeneity, fmt_projected_mde
from .common import (
    check_from_runs,
    from_runs_options,
    isolation_of,
    named_suite,
    print_campaign_json,
    render_campaign_reports,
    suite_and_sides,
    write_campaign_result,
)

DEFAULT_RUNS = 10


def main(a: argparse.Namespace) -> int:
    if not 0 <= a.max_rate <= 1:
        raise BadInput(f"--max-rate must be in [0, 1], got {a.max_rate}")
    check_from_runs(a, {"-n": a.n})
    if a.from_runs is not None:
        return from_runs(a)
    n = DEFAULT_RUNS if a.n is None else a.n
    if n < 1:
        raise BadInput(f"-n must be >= 1, got {n}")
    suite, base, cand, overrides = suite_and_sides(a)
    out = a.out or default_out(f"calibrate-{suite.name}")
    res, path = calibrate(suite, base, cand, n, overrides, out, isolation=isolation_of(a))
    render_campaign_reports(path, "calibrate", res)
    return _finish(a, res, path)


def add_from_runs_options(p: argparse.ArgumentParser) -> None:
    """calibrate's --from-runs and --waves (common.from_runs_options)."""
    from_runs_options(p, "calibration.json")


def from_runs(a: argparse.Namespace) -> int:
    """The campaign's result from the finished runs under --from-runs (nothing runs):
    printed, and with --out written as a campaign writes it, for a calibration that
    time-limited GPU jobs cut off or ran in pieces."""
    res = read_back_calibration(a.from_runs, named_suite(a.what), a.waves)
    path = None if a.out is None else \
        write_campaign_result(a.out, "calibrate", res)
    return _finish(a, res, path)


def _finish(a: argparse.Namespace, res: Calibration, path: Path | None) -> int:
    """Print the result (table or --json) and give the exit code: 3 when a run erred, 1
    when a check's false-alarm rate is above --max-rate."""
    if a.json:
        print_campaign_json(res)
    else:
        print_calibration(res)
        if path is not None:
            print(f"results: {path}")
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
