"""Targets register themselves on import; `vllm` imports vLLM only when a session opens.

More targets can be plugged in without changing mrbench: `MRBENCH_TARGET_MODULES` names
modules (comma-separated) that register targets with `mrbench.harness.run.targets.base.register`; they
are imported here, in the harness and in every engine process alike.
"""
import importlib
import os

from . import bundled, vllm  # noqa: F401
from .base import get_target  # noqa: F401

for _name in filter(None, (m.strip() for m in os.environ.get("MRBENCH_TARGET_MODULES", "")
                           .split(","))):
    importlib.import_module(_name)
