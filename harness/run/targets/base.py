"""Targets: how the harness opens engines.

A target opens a `Session` (`mrbench.contract`) for one side of a comparison: a runner on a
device with a model, maybe with fault switches. Targets register by name; the orchestrator
asks them whether a side can run a workload's engine shape and which sides can share one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

from mrbench.contract import BadInput, EngineOptions, FrozenArgs, Session

from ..builds import label as build_label
from ..builds import resolve as resolve_build


@dataclass(frozen=True)
class SideSpec:
    """One side of a comparison, as the user asked for it."""

    runner: str                          # e.g. "v2", "v1"
    device: str = "cpu"
    target: str = "bundled"              # the engine: "bundled" (runner_impl) or "vllm"
    model: str | None = None             # None = the target's bundled default
    faults: tuple[str, ...] = ()
    seed: int = 0
    build: str | None = None             # its own Python environment (harness.builds); None =
                                         # the harness's own
    engine_args: FrozenArgs = FrozenArgs()   # `--engine-arg`: the engine's own arguments, on
                                             # top of a suite's (harness.run.engine_args)
    # Run-wide settings a target reads, stamped on both sides from the run's isolation
    # (run_plan.plan_run), so that they reach engine processes with the side itself:
    vllm_sync_check: str | None = None   # `--vllm-sync-check`: vLLM's VLLM_GPU_SYNC_CHECK
    pd_gpus: tuple[int, int] | None = None   # `--pd-gpus P,D`: a PD pair's prefill and
                                             # decode GPUs, as the harness's process sees them
    kv_connector: str = "example"        # `--kv-connector`: a PD pair's KV connector


def engine_args_of(side: SideSpec, options: EngineOptions) -> FrozenArgs:
    """The engine arguments one engine of `side` gets for a shape: the suite's (in
    `options`, an entry's over the suite's) with the command line's (`side`) on top."""
    return FrozenArgs({**options.engine_args, **side.engine_args})


@dataclass(frozen=True)
class Footprint:
    """What one engine instance of a shape needs at least, for planning which engines are
    resident together (harness.run.engines.plan): bytes on its device (weights, the smallest KV
    cache the shape needs, an allowance for the process's context and CUDA graphs) and of
    the host's memory (its process)."""

    device: int
    host: int


class Target(Protocol):
    name: str

    def open(self, side: SideSpec, options: EngineOptions) -> Session: ...

    def validate(self, side: SideSpec) -> None:
        """Raise BadInput for a runner, device, model or fault this target cannot take."""

    def context_len(self, side: SideSpec) -> int:
        """The model's context in tokens (after validate), to check workloads up front."""

    def info(self) -> dict[str, Any]:
        """Runners and faults this target offers (for `mrbench list`)."""

    def unsupported(self, side: SideSpec, options: EngineOptions,
                    needs: frozenset[str] = frozenset()) -> str | None:
        """Why this engine shape (or a workload needing `needs`, e.g. "dispatch_log") cannot
        run here, asked before any engine starts; None if it can."""

    def engine_key(self, side: SideSpec, options: EngineOptions) -> Any:
        """Equal keys = one engine can serve both workloads (it is reused, not restarted)."""

    def footprint(self, side: SideSpec, options: EngineOptions) -> Footprint | None:
        """One instance's least memory, for planning residency; None: unknown (each engine
        shape is then resident alone)."""

    def check_engine_args(self, side: SideSpec, args: FrozenArgs) -> None:
        """Raise BadInput (one line) for an engine argument (`--engine-arg`, a suite's
        `engine_args`) this target's engine does not take, before any engine starts. A
        target without this method takes none (harness.run.engine_args refuses them)."""


class Unsupported(Exception):
    """A workload this target cannot run on the machine at hand (e.g. PD-disagg on vLLM's
    CPU build): recorded as "unsupported here" with the reason, not a failure."""


def side_label(side: SideSpec, other: SideSpec) -> str:
    """`v2` when both sides share a target, `vllm:v2` when they do not (cross-engine);
    `v2@pr` when the sides run different builds (the build's folder name)."""
    label = side.runner if side.target == other.target else f"{side.target}:{side.runner}"
    if side.build != other.build:
        label += f"@{build_label(side.build) if side.build else 'harness'}"
    return label


TARGETS: dict[str, Callable[[], Target]] = {}


def register(name: str) -> Callable:
    def deco(factory: Callable[[], Target]) -> Callable[[], Target]:
        TARGETS[name] = factory
        return factory
    return deco


def get_target(name: str) -> Target:
    if name not in TARGETS:
        raise BadInput(f"unknown target {name!r}; known: {', '.join(sorted(TARGETS))}")
    return TARGETS[name]()


def side_from_text(value: str, target: str, device: str, model: str | None,
                   faults: tuple[str, ...], seed: int) -> SideSpec:
    """A side from the CLI's grammar RUNNER, TARGET:RUNNER or TARGET@BUILD:RUNNER (a side
    named without a target gets `target`); BUILD is the side's own environment
    (harness.run.builds), resolved here so that a missing one is bad input before any run."""
    t, _, runner = value.rpartition(":")
    t, at, build = t.partition("@")
    t = t or target
    if t not in TARGETS:
        raise BadInput(f"unknown target {t!r} in {value!r}; known: {', '.join(sorted(TARGETS))}")
    if not runner:
        raise BadInput(f"runner {value!r} names no runner (e.g. v2, vllm:v1)")
    if at and not build:
        raise BadInput(f"{value!r} names no build after '@' (e.g. vllm@/venvs/main:v2)")
    if build:
        build = resolve_build(build).path
    return SideSpec(runner=runner, device=device, model=model, faults=faults, seed=seed,
                    target=t, build=build or None)
