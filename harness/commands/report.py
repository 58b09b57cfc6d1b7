"""`mrbench report`: (re)render report.html of results directories, or print a run's
verdict table (a campaign's faults matrix) as Markdown. With `--history DB`, each gated
latency figure of a run's report gets a sparkline over the comparable runs in that history."""
from __future__ import annotations

import argparse

from ..record.errors import EXIT_PASS
from ..record.results import read_record
from ..show.markdown import faults_markdown, run_markdown
from .common import render_run


def main(a: argparse.Namespace) -> int:
    if a.markdown:
        for run in a.runs:
            print(faults_markdown(run) if (run / "faults.json").is_file() else run_markdown(run))
        return EXIT_PASS
    for run in a.runs:
        read_record(run)      # not a run, or a newer format: one line, before rendering
        if a.history is None:
            print(render_run(run))
        else:         # a missing or foreign database: BadInput (history.open_existing)
            from ..show.report import render_report  # lazy: matplotlib, as in render_run
            print(render_report(run, history_db=a.history))
    return EXIT_PASS
