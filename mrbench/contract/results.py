"""What a workload hands back to the harness, and what it asks the harness to run."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .session import Sampling, TimedPrompt


@dataclass
class SideResult:
    """Everything one side produced for one workload; tables are lists of row dicts."""

    requests: list[dict] = field(default_factory=list)
    itl: list[dict] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    profile: list[dict] = field(default_factory=list)     # per profiled step
    audits: list[dict] = field(default_factory=list)
    dispatch: list[dict] = field(default_factory=list)    # (phase, kind, steps) incl. warmup
    tokens: list[list[int]] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=dict)
    resolved: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0


@dataclass
class SideFailure:
    """A side that raised: the harness records it and carries on with the other side."""

    error: str
    traceback: str


@dataclass
class Batch:
    """What a workload asks the driver to run, identically on every side: text prompts that
    arrive together per wave (offline batch), or timed token prompts replayed open loop
    (each wave's arrivals rebased to the wave's start)."""

    prompts: list[str] | list[TimedPrompt]
    max_tokens: int
    stop: list[str]
    wave_size: int                  # prompts per wave (a wave arrives at once)
    profile_limit: int              # prompts repeated under the profiler (0 = none)
    sampling: Sampling | None = None  # text prompts only; None = greedy
    logprobs: int | None = None       # text prompts only: top-N logprobs per generated
                                      # token (vLLM's SamplingParams.logprobs); None = none
