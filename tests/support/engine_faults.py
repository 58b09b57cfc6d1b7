"""A target whose engine dies or hangs on demand, to prove that mrbench records it.

Registered as "faulty" when imported (the tests import it, and name it in
MRBENCH_TARGET_MODULES so every engine process imports it too). Its runners wrap the bundled
V1 runner; `segv`, `exit` and `hang` break the engine on its first `generate` in any
workload whose engine has exactly `BREAK_AT_MAX_NUM_SEQS` slots, and run normally otherwise.

`start-exit` ends its engine process while it opens (exit code 9), for engines that start
together (harness.run.engines.bank): the other engines of the group start and run.

`pause` and `pause-close` stop that engine at a known point, so a test can act on the run
there instead of guessing a time: on its first `generate` (a workload in progress), or in its
`close` (the run's last phase, after every workload finished, when that engine is the last
one open). The engine writes the file named by $MRBENCH_TEST_PAUSE_FILE and waits while it
exists (at most PAUSE_MAX_S), then goes on normally.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import replace
from pathlib import Path

from mrbench.contract import BadInput
from mrbench.harness.run.targets.base import register
from mrbench.harness.run.targets.bundled import BundledSession, BundledTarget

BREAK_AT_MAX_NUM_SEQS = 3
RUNNERS = ("segv", "exit", "hang", "pause", "pause-close", "start-exit")
PAUSE_MAX_S = 120.0


def _pause() -> None:
    marker = Path(os.environ["MRBENCH_TEST_PAUSE_FILE"])
    marker.write_text(str(os.getpid()))
    deadline = time.monotonic() + PAUSE_MAX_S
    while marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


class _Faulty(BundledSession):
    def __init__(self, side, options) -> None:
        super().__init__(replace(side, runner="v1"), options)
        self.mode = side.runner
        self.armed = options.max_num_seqs == BREAK_AT_MAX_NUM_SEQS
        if self.armed and self.mode == "start-exit":
            os._exit(9)

    def generate(self, prompts, max_tokens, stop, sampling=None):
        if self.armed and self.mode == "pause":
            self.armed = False
            _pause()
        elif self.armed and self.mode != "pause-close":
            if self.mode == "segv":
                os.kill(os.getpid(), signal.SIGSEGV)
            elif self.mode == "exit":
                os._exit(7)
            else:
                time.sleep(3600)
        return super().generate(prompts, max_tokens, stop, sampling)

    def close(self) -> None:
        if self.armed and self.mode == "pause-close":
            _pause()
        super().close()

    def resolved(self):
        return dict(super().resolved(), target="faulty", runner=self.mode)


@register("faulty")
class FaultyTarget:
    name = "faulty"
    reopen_in_process = True

    def validate(self, side) -> None:
        if side.runner not in RUNNERS:
            raise BadInput(f"faulty target has runners {', '.join(RUNNERS)}")

    def open(self, side, options):
        return _Faulty(side, options)

    def context_len(self, side) -> int:
        return 512

    def footprint(self, side, options):
        """The bundled engine's: so that --engine-starts groups its shapes."""
        return BundledTarget().footprint(replace(side, runner="v1"), options)

    def info(self):
        return dict(runners=list(RUNNERS), faults=[])
