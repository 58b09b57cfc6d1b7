"""What the harness needs from an engine, and nothing more.

A target opens a `Session` for one side of a comparison (a runner on a device with a model,
maybe with fault switches). Workloads drive sessions only through this interface, so the same
workload runs on the bundled runner now and on vLLM later (issue 6).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol


@dataclass(frozen=True)
class SideSpec:
    """One side of a comparison, as the user asked for it."""

    runner: str                          # e.g. "v2", "v1"
    device: str = "cpu"
    model: str | None = None             # None = the target's bundled default
    faults: tuple[str, ...] = ()
    seed: int = 0


@dataclass(frozen=True)
class EngineOptions:
    """Engine shape a workload asks for (what a vLLM user would pass to `LLM`)."""

    max_num_seqs: int = 16
    max_num_batched_tokens: int = 2048
    num_speculative_tokens: int = 0
    speculative_method: str = "ngram"
    pd_disagg: bool = False
    dtype: str = "auto"
    state_audit: bool = False            # bundled only: poison freed slots, audit each step


@dataclass
class Completion:
    """One finished request, engine-neutral; times are host perf_counter seconds."""

    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    arrival_time: float
    token_times: list[float]
    finish_reason: str | None = None
    kv_handoff_s: float | None = None


@dataclass
class Step:
    """One engine step as the target saw it."""

    instance: str                        # "colocated" | "prefill" | "decode"
    index: int
    t_start: float
    t_end: float
    num_reqs: int
    num_tokens: int
    kind: str                            # dispatch class, e.g. "uniform_decode" / "mixed"


@dataclass
class AuditSample:
    """State audit of one step (targets that can see their runner's state)."""

    instance: str
    step: int
    max_slack: int                       # max over live requests of mirror - truth
    min_slack: int
    allowed_slack: int                   # the mirror may exceed the truth by at most this


class Session(Protocol):
    step_label: str                      # profiler range around one step
    auditing: bool                       # state audits on (only outside timed passes)
    phase_labels: dict[str, str]         # phase name -> profiler range name

    def generate(self, prompts: list[str], max_tokens: int, stop: list[str]) -> list[Completion]:
        """Greedy completions, in prompt order."""

    def fits(self, prompt: str, max_tokens: int) -> bool:
        """Whether the model's context can take the prompt (the engine would reject it)."""

    def steps(self) -> list[Step]:
        """Steps since the last `reset_steps`."""

    def reset_steps(self) -> None: ...

    def audits(self) -> list[AuditSample]:
        """State-audit samples since the last reset (empty if unsupported)."""

    def resolved(self) -> dict[str, Any]:
        """What actually ran (runner, device, dtype, model path, engine config) for the manifest."""

    def close(self) -> None: ...


class Target(Protocol):
    name: str

    def open(self, side: SideSpec, options: EngineOptions) -> Session: ...

    def validate(self, side: SideSpec) -> None:
        """Raise BadInput for a runner, device, model or fault this target cannot take."""

    def info(self) -> dict[str, Any]:
        """Runners and faults this target offers (for `mrbench list`)."""


TARGETS: dict[str, Callable[[], Target]] = {}


def register(name: str) -> Callable:
    def deco(factory: Callable[[], Target]) -> Callable[[], Target]:
        TARGETS[name] = factory
        return factory
    return deco


def get_target(name: str) -> Target:
    from ..errors import BadInput
    if name not in TARGETS:
        raise BadInput(f"unknown target {name!r}; known: {', '.join(sorted(TARGETS))}")
    return TARGETS[name]()
