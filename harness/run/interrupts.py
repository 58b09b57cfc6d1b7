"""SIGINT and SIGTERM while a command runs: raised as KeyboardInterrupt while work can still
be given up, held while results are written, and never lost.

Why not Python's default: Python installs its KeyboardInterrupt handler for SIGINT only when
the process starts with SIGINT at its default. A job started in the background by a
non-interactive shell (`cmd &` in a CI script, a runner's step) starts with SIGINT ignored,
and so does everything it spawns: a group-wide Ctrl-C, or `timeout -s INT`, then reached the
run and did nothing; the run went on and exited 0. `installed()` sets the handler for both
signals whatever the process inherited.

Why hold: a signal that lands while the run's directory is being committed or its report
rendered would leave a half-written result, or lose a run whose every workload finished.
Inside `held()` a signal is recorded and the work goes on; the command then ends with exit
130 and says that its results are complete (`caught()` tells it a signal came).
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)

_caught: list[str] = []          # names of the signals received, in order
_holding = 0                     # > 0 inside held(): record, do not raise


def _handler(signum: int, frame) -> None:
    _caught.append(signal.Signals(signum).name)
    if not _holding:
        raise KeyboardInterrupt(signal.Signals(signum).name)


@contextmanager
def installed() -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt (or are held, see `held`) for the body,
    whatever the process inherited; the old handlers come back after. Off the main thread
    (a command called from a test's thread) signals cannot be handled: nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _caught.clear()
    old = {s: signal.signal(s, _handler) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            if h is not None:            # None: a handler not set from Python
                signal.signal(s, h)
        _caught.clear()                  # a later command in this process starts unsignalled


@contextmanager
def held() -> Iterator[None]:
    """A signal inside the body is recorded (`caught`), not raised: the body finishes.
    Nests."""
    global _holding
    _holding += 1
    try:
        yield
    finally:
        _holding -= 1


def caught() -> str | None:
    """The first signal received inside the current `installed()`, by name, or None."""
    return _caught[0] if _caught else None
