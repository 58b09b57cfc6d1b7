"""`mrbench compare`: gate the candidate side of one run against another's (or against the
last passing comparable run in the history); the logic is `harness.regate`."""
from __future__ import annotations

import argparse
from pathlib import Path

from mrbench.contract import BadInput

from ..checks.regate import last_passing_baseline, regate
from ..record import history
from ..record.results import default_out
from .common import percentiles_of, percentiles_option, print_summary, render_run


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`mrbench compare` and its options."""
    c = sub.add_parser("compare", help="gate the candidate side of one run against another's")
    c.add_argument("runs", nargs="+", type=Path, metavar="RUN",
                   help="BASE CAND, or CAND alone with --baseline last-pass")
    c.add_argument("--baseline", choices=["last-pass"],
                   help="last-pass: the newest passing comparable run in the history")
    c.add_argument("--db", type=Path, help="history database (default results/history.sqlite)")
    c.add_argument("--side", default="candidate", choices=["candidate", "baseline"],
                   help="which side of each run to compare (default candidate)")
    c.add_argument("--out", type=Path)
    percentiles_option(c, "the base run's")
    c.add_argument("--json", action="store_true")
    return c


def main(a: argparse.Namespace) -> int:
    percentiles = percentiles_of(a.percentiles)
    if a.baseline == "last-pass":
        if len(a.runs) != 1:
            raise BadInput("with --baseline last-pass give only the candidate run")
        cand = a.runs[0]
        base = last_passing_baseline(cand, a.db or history.DEFAULT_DB)
        print(f"baseline: {base} (last passing comparable run)")
    elif len(a.runs) != 2:
        raise BadInput("compare needs BASE and CAND runs (or CAND with --baseline last-pass)")
    else:
        base, cand = a.runs
    summary, code, path = regate(base, cand, a.out or default_out("compare"), a.side,
                                 percentiles)
    render_run(path)
    print_summary(summary, path, a.json)
    return code
