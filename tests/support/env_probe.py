"""A target whose engine says which process it runs in, what that process imported before
it and what environment it sees, for the tests of engine processes forked from a preloading
process (harness.run.engines.preload).

Registered as "envprobe" when imported (tests name it in MRBENCH_TARGET_MODULES so every
engine process imports it too). It names itself among its preload modules, so in a forked
engine the module was imported by the preloading process, not by the engine's own.
"""
from __future__ import annotations

import os

from mrbench.harness.run.targets.base import register
from mrbench.harness.run.targets.bundled import BundledTarget

IMPORTED_IN = os.getpid()                # the process that imported this module
# the preload's own environment, seen as the module is imported (not by the engine after)
PRELOADED_ENV = os.environ.get("ENV_PROBE_PRELOADED")


class _ProbeSession:
    vocab_size = 1
    step_label = "step"
    phase_labels: dict = {}

    def resolved(self) -> dict:
        return dict(pid=os.getpid(), ppid=os.getppid(), imported_in=IMPORTED_IN,
                    probe=os.environ.get("ENV_PROBE"),
                    volatile=os.environ.get("PYTEST_CURRENT_TEST"),
                    preloaded_env=PRELOADED_ENV,
                    engine_env=os.environ.get("ENV_PROBE_PRELOADED"))

    def close(self) -> None:
        pass


class _ProbeTarget(BundledTarget):
    """The bundled target (its listing, planning and checks) whose sessions only probe."""

    name = "envprobe"

    def preload(self, side):
        return (__name__,), {"ENV_PROBE_PRELOADED": "1"}

    def open(self, side, options):
        return _ProbeSession()


register("envprobe")(_ProbeTarget)
