"""`mrbench compare`: gate the candidate side of one run against another's (or against the
last passing comparable run in the history); the logic is `harness.regate`."""
from __future__ import annotations

import argparse

from mrbench.contract import BadInput

from ..checks.regate import last_passing_baseline, regate
from ..record import history
from ..record.results import default_out
from .common import percentiles_of, print_summary, render_run


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
