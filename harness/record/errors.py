"""Exit codes of the CLI.

0 pass; 1 a regression (or a missed fault); 2 bad input (`mrbench.contract.BadInput`: the
user's config, flags, dataset or paths are wrong, said in one line before anything is
written); 3 a run failed (a target crashed or hung; recorded in the results, and the other
workloads still ran), or its results could not be written (`ResultsNotWritten`: one line,
nothing written), or its report could not be written after the results were
(`ReportNotWritten`: one line, the results complete); 130 interrupted (SIGINT or SIGTERM:
a run keeps what finished, see `RunInterrupted`).
"""
from __future__ import annotations

import errno
import os
from pathlib import Path
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


def _mount_point(path: Path) -> Path:
    """The mount point of the filesystem `path` (or its nearest existing parent) is on."""
    p = Path(os.path.abspath(path))
    while not p.exists():
        p = p.parent
    while not os.path.ismount(p):
        p = p.parent
    return p


class ResultsNotWritten(Exception):
    """A run's results could not be written to `out` (a full disk, a quota, a read-only
    mount). The writer removed its hidden directory, so nothing half-written is left there
    for `report` or `history add` to take for a run, and a run written there before is as
    it was. The CLI says it in one line, which names the directory, the filesystem and the
    OS's error, and exits EXIT_RUN_FAILED."""

    def __init__(self, out: Path, e: OSError) -> None:
        code = errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__
        writing = f" writing {Path(e.filename).name}" if e.filename else ""
        super().__init__(
            f"the results could not be written to {out}: {e.strerror or e} [{code}]"
            f"{writing} on the filesystem mounted at {_mount_point(out)}; nothing was "
            "written there: free space there or write the results elsewhere (--out)")
        self.out, self.errno = out, e.errno


class ReportNotWritten(Exception):
    """A report (`report.html` of a run or a campaign) could not be written to `out` after
    the results beside it were committed: a full disk, a quota, a read-only mount. The
    atomic write left no half report (harness.show.html.write_atomic) and the committed
    results are complete and untouched, so the report can be rendered again once there is
    room (`mrbench report DIR`). The CLI says it in one line, which names the file, the
    filesystem and the OS's error, and exits EXIT_RUN_FAILED."""

    def __init__(self, out: Path, e: OSError) -> None:
        code = errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__
        super().__init__(
            f"the report could not be written to {out}: {e.strerror or e} [{code}] on the "
            f"filesystem mounted at {_mount_point(out)}; the results in {out.parent} are "
            f"complete and unchanged: free space there, then `mrbench report {out.parent}`")
        self.out, self.errno = out, e.errno
