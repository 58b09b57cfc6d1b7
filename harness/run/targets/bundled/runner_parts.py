"""The bundled runner's pieces that the rest of the harness uses: its default model and
EAGLE head, the random-weight model presets, the per-thread CPU clock, its error type and
its fault switches.

Why one door: the bundled runner (`mrbench.runner_impl`) is one of the two engines under
comparison, not a library of the harness. The harness opens it only through the bundled
target's package (import-linter's `runner-behind-bundled` contract), so what other targets
and commands borrow from it is named here, once, and a change inside the runner shows up in
one place.
"""
from mrbench.runner_impl import COVERAGE_FAULTS, FAULTS, KNOWN_FAULTS, RunnerError
from mrbench.runner_impl.default_model import (
    DEFAULT_EAGLE_DIR,
    DEFAULT_MODEL_DIR,
    default_model_dir,
)
from mrbench.runner_impl.model import random_presets
from mrbench.runner_impl.model.random_presets import eagle_head_of, is_random_weights
from mrbench.runner_impl.thread_clock import thread_clock

__all__ = [
    "COVERAGE_FAULTS",
    "DEFAULT_EAGLE_DIR",
    "DEFAULT_MODEL_DIR",
    "FAULTS",
    "KNOWN_FAULTS",
    "RunnerError",
    "default_model_dir",
    "eagle_head_of",
    "is_random_weights",
    "random_presets",
    "thread_clock",
]
