"""The harness's two failure kinds, mapped to exit codes by the CLI.

BadInput (exit 2): the user's config, flags, dataset or paths are wrong; say what, in one
line, before anything is written. WorkloadFailed (exit 3): a target crashed or hung; it is
recorded in the results and the other workloads still run.
"""
from __future__ import annotations

EXIT_PASS, EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_RUN_FAILED = 0, 1, 2, 3


class BadInput(Exception):
    """A problem with what the user gave us; the message is the whole error line."""


class WorkloadFailed(Exception):
    """A workload could not produce results on one side (crash, hang, engine error)."""
