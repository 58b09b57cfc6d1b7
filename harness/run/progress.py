"""Progress of a run: one line per event on stderr, and a bar when stderr is a terminal.

Why lines as well as a bar: nightly logs are files, where a tqdm bar is silent (or a
carriage-return smear), and an engine start can take a minute. So every workload x side
says when it starts, when its engine is ready and how long it took, and when it is done,
with the run's elapsed time, whether or not anyone is watching. Long workloads also say
which wave they are on, at most every `WAVE_EVERY_S` seconds.

The driver (harness/run/execute.py) reports through `current()`, so workloads need no
progress argument.
"""
from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import IO, Iterator

from tqdm import tqdm

WAVE_EVERY_S = 20.0

_current: "Progress | None" = None


class Progress:
    def __init__(self, total: int, desc: str, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr      # looked up now: pytest may swap stderr
        self.t0 = time.monotonic()
        self.workload = ""
        self.side_names: dict[str, str] = {}    # "baseline" -> "vllm:v1"
        self._last_wave_line = 0.0
        isatty = getattr(self.stream, "isatty", lambda: False)()
        self.bar = tqdm(total=total, desc=desc, unit="workload", file=self.stream,
                        disable=not isatty, leave=False)

    def elapsed(self) -> str:
        s = int(time.monotonic() - self.t0)
        return f"{s // 60}:{s % 60:02d}"

    def line(self, msg: str) -> None:
        text = f"[mrbench +{self.elapsed()}] {msg}"
        if not self.bar.disable:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def side(self, side: str, msg: str) -> None:
        name = self.side_names.get(side, "")
        self.line(f"{self.workload} / {side}{f' ({name})' if name else ''}: {msg}")

    def status(self, msg: str) -> None:
        self.bar.set_postfix_str(msg)

    def wave(self, done: int, total: int) -> None:
        self.status(f"{self.workload}: wave {done}/{total}")
        now = time.monotonic()
        if done == total or now - self._last_wave_line >= WAVE_EVERY_S:
            self._last_wave_line = now
            self.line(f"{self.workload}: wave {done}/{total} done")

    def advance(self) -> None:
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


@contextmanager
def active(p: Progress) -> Iterator[Progress]:
    global _current
    prev, _current = _current, p
    try:
        yield p
    finally:
        _current = prev
        p.close()


def current() -> Progress | None:
    return _current
