"""`mrbench run`: the suite on baseline and candidate, gated; the report from the final
results directory."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mrbench.contract import BadInput

from ..record.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED, RunInterrupted
from ..record.results import default_out
from ..run import interrupts
from ..run.orchestrate import run_suite
from ..show.junit import write_junit
from .common import (
    isolation_of,
    percentiles_of,
    percentiles_option,
    print_summary,
    run_options,
    suite_and_sides,
    try_render_run,
)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`mrbench run` and its options."""
    r = sub.add_parser("run", help="run suites or workloads on baseline and candidate")
    r.add_argument("what", nargs="*", default=["quick"], metavar="SUITE|WORKLOAD",
                   help="shipped suite name, suite YAML path, or workload name (default quick)")
    run_options(r)
    r.add_argument("--fault", action="append", default=[], metavar="NAME",
                   help="fault switch for the candidate (repeatable)")
    r.add_argument("--save-reference", action="store_true",
                   help="store both sides' op/alloc counts as the reference for this build")
    r.add_argument("--history", type=Path, metavar="DB",
                   help="also judge each latency ratio (candidate/baseline) against the "
                        "earlier clean passing comparable runs' in this history database "
                        "(V2 against V1 over time; 'not measured' until it holds 3)")
    percentiles_option(r, "the suite's `percentiles`, else 90,99")
    r.add_argument("--junit-xml", type=Path, metavar="FILE",
                   help="also write the checks as JUnit XML, one test case per check "
                        "(regressions fail with their figures; not gated or not measured: "
                        "skipped), for CI systems' test reports")
    return r


def main(a: argparse.Namespace) -> int:
    if a.junit_xml is not None and a.junit_xml.is_dir():
        raise BadInput(f"--junit-xml {a.junit_xml} is a directory; name a file")
    suite, base, cand, overrides = suite_and_sides(a, tuple(a.fault))
    percentiles = percentiles_of(a.percentiles)
    out = a.out or default_out(suite.name)
    try:
        summary, code, path = run_suite(suite, base, cand, overrides, out,
                                        save_reference=a.save_reference,
                                        isolation=isolation_of(a), history_db=a.history,
                                        percentiles=percentiles)
    except RunInterrupted as e:         # the finished workloads are written: report them
        with interrupts.held():
            unwritten = try_render_run(e.path)
            print_summary(e.summary, e.path, a.json, report=unwritten is None)
            if a.junit_xml is not None:
                write_junit(e.summary, a.junit_xml)
        if unwritten is not None:
            print(f"mrbench: error: {unwritten}", file=sys.stderr)
        left = e.summary.interrupted
        print(f"mrbench: interrupted: the {len(left.finished)} finished workloads are in "
              f"{e.path}; {len(left.not_run)} not run", file=sys.stderr)
        return EXIT_INTERRUPTED
    with interrupts.held():             # a signal now is recorded: the report is written whole
        # a full disk now leaves the committed run as it is: its verdict is still printed,
        # then one line names the report that is missing, and the run exits 3
        unwritten = try_render_run(path)
        print_summary(summary, path, a.json, report=unwritten is None)
        if a.junit_xml is not None:
            write_junit(summary, a.junit_xml)
        if a.save_reference and not a.json:
            print("references: " + ("not saved (a side failed)" if summary.failures else
                                    "saved under results/baselines/op-counts/"))
    if unwritten is not None:
        print(f"mrbench: error: {unwritten}", file=sys.stderr)
    late = interrupts.caught()
    if late:                            # it came after the last workload: nothing was lost
        print(f"mrbench: interrupted ({late}) after every workload finished: the results in "
              f"{path} are complete (verdict {summary.verdict})", file=sys.stderr)
        return EXIT_INTERRUPTED
    return code if unwritten is None else EXIT_RUN_FAILED
