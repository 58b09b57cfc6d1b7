"""Exit codes of the CLI.

0 pass; 1 a regression (or a missed fault); 2 bad input (`mrbench.contract.BadInput`: the
user's config, flags, dataset or paths are wrong, said in one line before anything is
written); 3 a run failed (a target crashed or hung; recorded in the results, and the other
workloads still ran); 130 interrupted (SIGINT or SIGTERM: a run keeps what finished, see
`RunInterrupted`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:                        # run_record imports the exit codes from here
    from .run_record import RunSummary

EXIT_PASS, EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_RUN_FAILED = 0, 1, 2, 3
EXIT_INTERRUPTED = 130                   # the shell's 128 + SIGINT


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM after its results were written: the workloads that
    finished are in `path` with their checks, the one in progress is a failure, the rest
    are listed as not run, and the verdict is "error". A nightly under a wall-clock limit
    (`timeout -s INT`) so keeps its finished work instead of losing the run. A KeyboardInterrupt
    still, so that a campaign of runs stops at it."""

    def __init__(self, summary: RunSummary, path) -> None:
        super().__init__(f"interrupted; results in {path}")
        self.summary, self.path = summary, path
