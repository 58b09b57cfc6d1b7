"""`mrbench history add` that stops inside its transaction, so that a test can kill it there.

Run as `python -m support.history_writer MARKER --db DB RUN ...` (tests/ on PYTHONPATH).
The history's SQLite connections get a page cache of one page, so the transaction's pages
reach the database file before COMMIT, as they do while COMMIT writes them or in a large
add: a kill then leaves SQLite's journal beside a file that holds part of the transaction,
the state a reader must roll back. At COMMIT the process writes its pid to MARKER and waits
while MARKER exists (at most PAUSE_MAX_S), then commits.
"""
from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path

PAUSE_MAX_S = 120.0


class _PausingConnection(sqlite3.Connection):
    """A connection whose transaction spills to the file and pauses before its COMMIT."""

    def execute(self, sql: str, *args):           # type: ignore[override]
        if sql == "BEGIN IMMEDIATE":
            super().execute("PRAGMA cache_size = 1")
        elif sql == "COMMIT":
            _pause()
        return super().execute(sql, *args)


def _pause() -> None:
    marker = Path(sys.argv[1])
    ready = marker.with_name(marker.name + ".tmp")
    ready.write_text(str(os.getpid()))
    ready.replace(marker)                        # whole when it appears
    deadline = time.monotonic() + PAUSE_MAX_S
    while marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def main() -> int:
    connect = sqlite3.connect
    sqlite3.connect = lambda *a, **k: connect(*a, factory=_PausingConnection, **k)
    from mrbench.harness.cli import main as cli
    return cli(["history", "add", *sys.argv[2:]])


if __name__ == "__main__":
    sys.exit(main())
