"""`mrbench report`: (re)render report.html of results directories, or print a run's
verdict table (a campaign's faults matrix) as Markdown. With `--history DB`, each gated
latency figure of a run's report gets a sparkline over the comparable runs in that history."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..record.errors import EXIT_PASS
from ..record.results import read_record
from ..show.markdown import faults_markdown, run_markdown
from .common import render_run


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`mrbench report` and its options."""
    rep = sub.add_parser("report", help="(re)render report.html of results directories")
    rep.add_argument("runs", nargs="+", type=Path)
    rep.add_argument("--markdown", action="store_true",
                     help="print the verdict table (or a faults matrix) as Markdown instead")
    rep.add_argument("--history", type=Path, metavar="DB",
                     help="history database: a sparkline of each gated latency figure over "
                          "the newest comparable runs in it")
    return rep


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
