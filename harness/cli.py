"""mrbench: replay workloads on a candidate and a baseline model runner and gate regressions.

Exit codes: 0 pass, 1 regression, 2 bad input, 3 a run failed (or its results could not be
written), 130 interrupted.
"""
# This module only builds the parser and dispatches: each command is harness/commands/<name>.py.
from __future__ import annotations

import argparse
import sys

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
    run.add_parser(sub)          # each command declares its own parser, in the order
                                 # `mrbench --help` lists them
    for command in (faults, calibrate, power, steps, compare, import_bench, history, report,
                    schema, model, list_, data):
        command.add_parser(sub)
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
