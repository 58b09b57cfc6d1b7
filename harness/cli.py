"""mrbench: replay workloads on a candidate and a baseline model runner and gate regressions.

Exit codes: 0 pass, 1 regression, 2 bad input, 3 a run failed (or its results could not be
written), 130 interrupted.
"""
# This module only builds the parser and dispatches: each command is harness/commands/<name>.py.
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mrbench.contract import BadInput

from .commands import (
    calibrate,
    compare,
    data,
    faults,
    history,
    import_bench,
    model,
    power,
    report,
    run,
    schema,
    steps,
)
from .commands import list as list_
from .commands.common import percentiles_option, run_options
from .record.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_RUN_FAILED,
    ReportNotWritten,
    ResultsNotWritten,
)
from .run import (
    interrupts,
    targets,  # noqa: F401  (registers the targets, plugins of MRBENCH_TARGET_MODULES too)
)

COMMANDS = {"run": run.main, "faults": faults.main, "calibrate": calibrate.main,
            "power": power.main, "steps": steps.main, "history": history.main,
            "import-bench": import_bench.main, "compare": compare.main, "report": report.main,
            "list": list_.main, "data": data.main, "schema": schema.main,
            "model": model.main}


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line and exit 2 (no usage dump)."""

    def error(self, message: str) -> None:    # type: ignore[override]
        raise BadInput(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="mrbench", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

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

    f = sub.add_parser("faults", help="the catch matrix: the suite clean, then once per fault")
    f.add_argument("what", nargs="*", default=["quick"], metavar="SUITE|WORKLOAD")
    run_options(f)
    f.add_argument("--fault", action="append", default=[], metavar="NAME",
                   help="only these faults (repeatable; default: every fault of the target)")
    f.add_argument("--ruler", action="append", default=[], metavar="slow-step:PCT",
                   help="also a latency ruler: PCT %% of the forward's time added to every "
                        "V2 step (bundled target); it must be caught like a fault")

    k = sub.add_parser("calibrate", help="A/A: the suite N times with no change; false alarms")
    k.add_argument("what", nargs="*", default=["quick"], metavar="SUITE|WORKLOAD")
    run_options(k, candidate_default=None)
    k.add_argument("-n", type=int, default=None, help="number of runs (default 10)")
    k.add_argument("--max-rate", type=float, default=0.10,
                   help="exit 1 if any check's false-alarm rate is above this (default 0.10)")
    calibrate.add_from_runs_options(k)

    pw = sub.add_parser("power", help="detection power: the suite clean and with slow-step:PCT "
                                      "on the candidate, N runs each; the minimum detectable "
                                      "slowdown per latency check")
    pw.add_argument("what", nargs="*", default=["quick"], metavar="SUITE|WORKLOAD")
    run_options(pw, candidate_default=None,
                baseline_default="v2")       # the ruler lives in V2: A/A on V2 by default
    pw.add_argument("-n", type=int, default=None, help="runs per setting (default 5)")
    pw.add_argument("--pcts", default=None,
                    help="slow-step sizes, %% of the measured engine step (default 10,25,50)")
    power.add_from_runs_options(pw)

    st = sub.add_parser("steps", help="record a scheduler-step trace, or replay one on a runner")
    ssub = st.add_subparsers(dest="steps_cmd", required=True, parser_class=_Parser)
    rec = ssub.add_parser("record", help="run GSM8K prompts on one runner, write the step trace")
    rec.add_argument("--out", type=Path, required=True, help="trace file (JSONL)")
    rec.add_argument("--runner", default="v1")
    rec.add_argument("--mode", choices=["pd", "colocated"], default="pd")
    rec.add_argument("--limit", type=int, default=16)
    rec.add_argument("--seed", type=int, default=None, help="problem-generator seed")
    rec.add_argument("--max-num-seqs", type=int, default=4)
    rec.add_argument("--model")
    rep_ = ssub.add_parser("replay", help="feed a step trace to a runner; first divergent step")
    rep_.add_argument("trace", type=Path)
    rep_.add_argument("--runner", default="v2")
    rep_.add_argument("--fault", action="append", default=[], metavar="NAME")
    rep_.add_argument("--model")
    rep_.add_argument("--json", action="store_true")

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

    ib = sub.add_parser("import-bench", help="vllm bench serve/latency JSON -> a results "
                        "directory (for compare, report, history)")
    ib.add_argument("files", nargs="+", type=Path, metavar="FILE.json",
                    help="one or more result files of one setup (pooled)")
    ib.add_argument("--out", type=Path, help="results directory (default results/<time>-...)")
    ib.add_argument("--side", default="candidate", choices=["candidate", "baseline"],
                    help="the side the data is stored as (default candidate, what compare reads)")
    ib.add_argument("--label", help="name of the run (default: vLLM's label, else file name)")
    ib.add_argument("--json", action="store_true")

    h = sub.add_parser("history", help="result history (SQLite) and trend reports")
    hsub = h.add_subparsers(dest="history_cmd", required=True, parser_class=_Parser)
    ha = hsub.add_parser("add", help="append runs to the history (creates the database)")
    ha.add_argument("runs", nargs="+", type=Path)
    hr = hsub.add_parser("report", help="trend report with change points, one HTML file; "
                         "exit 1 when the newest run starts a change point",
                         description="Trend report with change points, one HTML file; "
                         "each change names its first bad vLLM commit and the last good one.",
                         epilog=history.REPORT_EXIT_CODES)
    hr.add_argument("--gate-run", type=Path, action="append", metavar="RUN",
                    help="exit 1 only for changes in the groups of these runs (repeatable; "
                         "the runs a job just added); default: every group")
    hr.add_argument("--out", type=Path, help="HTML file (default: history.html beside the db)")
    hr.add_argument("--latency-min-rel", type=float, default=0.20,
                    help="smallest latency/throughput step to mark (default 0.20)")
    hr.add_argument("--absolute-latency", action="store_true",
                    help="judge latency on the candidate's own figures, not the per-run "
                         "candidate/baseline ratio (for a stable, dedicated host)")
    hr.add_argument("--json", action="store_true", help="print the change points as JSON")
    hl = hsub.add_parser("list", help="the runs in the history")
    for x in (ha, hr, hl):
        x.add_argument("--db", type=Path, help="database (default results/history.sqlite)")

    rep = sub.add_parser("report", help="(re)render report.html of results directories")
    rep.add_argument("runs", nargs="+", type=Path)
    rep.add_argument("--markdown", action="store_true",
                     help="print the verdict table (or a faults matrix) as Markdown instead")
    rep.add_argument("--history", type=Path, metavar="DB",
                     help="history database: a sparkline of each gated latency figure over "
                          "the newest comparable runs in it")

    sc = sub.add_parser("schema", help="the JSON Schema of a result file: a run's "
                                       "summary.json or manifest.json, a campaign's "
                                       "faults.json, calibration.json or power.json "
                                       "(docs/schema/ holds them)")
    schema.add_arguments(sc)

    model.add_arguments(sub.add_parser("model", help="random-weight models at real shapes "
                                                     "(`model make --preset llama-8b`)"))

    ls = sub.add_parser("list", help="workloads, suites, targets and faults")
    ls.add_argument("--json", action="store_true")

    d = sub.add_parser("data", help="the data files each suite reads, where they were found "
                                    "and where they come from; `data fetch` downloads them")
    d.add_argument("--json", action="store_true")
    dsub = d.add_subparsers(dest="data_cmd", parser_class=_Parser)
    df = dsub.add_parser("fetch", help="download the full data sets (needs a network)")
    df.add_argument("files", nargs="*", metavar="FILE",
                    help="data files to fetch, as `mrbench data` names them (default: all)")
    df.add_argument("--dest", type=Path,
                    help="folder to write (default $MRBENCH_DATA_DIR, else ~/.cache/mrbench/"
                         "data, where runs look for it)")
    return p


def main(argv: list[str] | None = None) -> int:
    """The CLI. SIGINT and SIGTERM (a CI job's or a scheduler's time limit) end a command
    with exit 130 whatever the process inherited (harness.interrupts says why); a run so
    stopped writes what finished (errors.RunInterrupted)."""
    with interrupts.installed():
        try:
            a = _parser().parse_args(argv)
            return COMMANDS[a.cmd](a)
        except BadInput as e:
            print(f"mrbench: error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except ResultsNotWritten as e:     # a full disk at the commit: nothing written
            print(f"mrbench: error: {e}", file=sys.stderr)
            return EXIT_RUN_FAILED
        except ReportNotWritten as e:      # a full disk after the commit: the results stand
            print(f"mrbench: error: {e}", file=sys.stderr)
            return EXIT_RUN_FAILED
        except KeyboardInterrupt:
            print("mrbench: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
