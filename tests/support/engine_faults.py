"""A target whose engine dies or hangs on demand, to prove that mrbench records it.

Registered as "faulty" when imported (the tests import it, and name it in
MRBENCH_TARGET_MODULES so every engine process imports it too). Its runners wrap the bundled
V1 runner; `segv`, `exit` and `hang` break the engine on its first `generate` in any
workload whose engine has exactly `BREAK_AT_MAX_NUM_SEQS` slots, and run normally otherwise.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import replace

from mrbench.contract import BadInput
from mrbench.harness.targets.base import register
from mrbench.harness.targets.bundled import BundledSession

BREAK_AT_MAX_NUM_SEQS = 3
RUNNERS = ("segv", "exit", "hang")


class _Faulty(BundledSession):
    def __init__(self, side, options) -> None:
        super().__init__(replace(side, runner="v1"), options)
        self.mode = side.runner
        self.armed = options.max_num_seqs == BREAK_AT_MAX_NUM_SEQS

    def generate(self, prompts, max_tokens, stop, sampling=None):
        if self.armed:
            if self.mode == "segv":
                os.kill(os.getpid(), signal.SIGSEGV)
            elif self.mode == "exit":
                os._exit(7)
            else:
                time.sleep(3600)
        return super().generate(prompts, max_tokens, stop, sampling)

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

    def info(self):
        return dict(runners=list(RUNNERS), faults=[])
