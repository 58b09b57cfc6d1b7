"""The one error a workload raises on its own: bad input from the user."""
from __future__ import annotations


class BadInput(Exception):
    """A problem with what the user gave us (config, flags, dataset, trace, paths): the
    message is the whole error line. The CLI prints it and exits 2, before anything is
    written."""
