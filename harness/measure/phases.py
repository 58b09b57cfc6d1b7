"""The harness's own phase labels, put around a model runner's own methods.

Why the harness labels phases itself: a sync or an op counts against the phase it ran in,
and the gate's "hot path" is prepare + forward + sample + postprocess. If the phases came
from the runner's own profiler scopes, a runner that emits none (vLLM's Model Runner V2 has
no `gpu_model_runner: ...` scope anywhere) would show zero syncs by construction, and a
hidden sync would pass. So the harness wraps methods every runner of a family has, with one
`record_function` range per call, and the counters attribute each event to the innermost
range of its own thread that holds it (the forward runs inside `execute_model`, so its ops
are the forward's; harness/measure/profiler.py says why the thread).

The phases (the same names for every runner):
- prepare: the step's state updates and input preparation (what runs in `execute_model`
  outside the forward and the logits);
- forward: the model call, eager or CUDA-graph replay;
- sample: logits and sampling (rejection sampling under spec decode);
- postprocess: the rest of the step (bookkeeping, state updates after sampling, drafting);
- output: the host's wait for the step's output copy. MRv2 waits here on purpose (one event
  per step), so it is not part of the hot path.

A `PhaseMap` names, per phase (and "step", the range steps are cut by, where the engine's
own step is not already wrapped by its target), where the ranges go, as attribute paths
from the runner:
`"execute_model"` wraps a method, `"model()"` the call of an `nn.Module` (forward hooks; its
class may be compiled), `"sample_tokens().get_output"` the method of what a call returns (V2's
host wait happens in `AsyncOutput.get_output`, later). A path that does not resolve on the
runner at hand is reported, never guessed: the count checks then say "not measured".
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

PHASES = ("prepare", "forward", "sample", "postprocess", "output")
HOT_PHASES = PHASES[:4]
STEP_LABEL = "mrbench::step"
PHASE_LABELS = {p: f"mrbench::{p}" for p in PHASES}
# A PD pair's KV connector calls (vLLM's, inside its load before the forward, its per-layer save
# inside the forward and its wait after it): their syncs and ops are the transfer's, not the
# runner's hot path (harness/run/targets/vllm/kv_connector.py puts the range around each call).
TRANSFER_PHASE = "kv_transfer"
TRANSFER_LABEL = f"mrbench::{TRANSFER_PHASE}"

PhaseMap = tuple[tuple[str, str], ...]      # (phase, attribute path from the runner);
                                            # phase "step" = the step range itself

# vLLM's Model Runner V2 (vllm/v1/worker/gpu/model_runner.py, 0.26): execute_model prepares
# and runs the model (FULL graphs replay in run_fullgraph; PIECEWISE and eager call the
# model); sample_tokens samples (`sample`, which computes the logits), post-updates the
# device state and proposes drafts; AsyncOutput.get_output waits for the output copy.
VLLM_V2: PhaseMap = (
    ("prepare", "execute_model"),
    ("forward", "cudagraph_manager.run_fullgraph"),
    ("forward", "cudagraph_manager.run_pw_graph"),
    ("forward", "model()"),
    ("sample", "sample"),
    ("postprocess", "sample_tokens"),
    ("output", "sample_tokens().get_output"),
)
# vLLM's V1 runner (vllm/v1/worker/gpu_model_runner.py): execute_model prepares, runs
# `_model_forward` and computes the logits; sample_tokens samples (`_sample`) and does the
# bookkeeping (a host sync when async scheduling is off); async outputs wait in get_output.
VLLM_V1: PhaseMap = (
    ("prepare", "execute_model"),
    ("forward", "_model_forward"),
    ("sample", "model.compute_logits"),
    ("sample", "_sample"),
    ("postprocess", "sample_tokens"),
    ("output", "sample_tokens().get_output"),
)


# The bundled runners (runner_impl): one method per phase. V2's step is `_launch` (the step
# without its output copy; execute_model and execute_model_async both call it), its output
# the copy methods; V1's step is execute_model (it has no separate output copy).
BUNDLED_V2: PhaseMap = (
    ("step", "_launch"),
    ("prepare", "_prepare"),
    ("forward", "_forward"),
    ("sample", "_sample"),
    ("postprocess", "_postprocess"),
    ("output", "_wait_uploads"),
    ("output", "_start_copy"),
    ("output", "_finish_copy"),
)
BUNDLED_V1: PhaseMap = (
    ("step", "execute_model"),
    ("prepare", "_prepare"),
    ("forward", "_forward"),
    ("sample", "_sample"),
    ("postprocess", "_postprocess"),
)


def _profiling() -> bool:
    return torch.autograd._profiler_enabled()


def _ranged(fn: Callable, label: str) -> Callable:
    """`fn` inside a profiler range, only while a profiler runs (no cost in timed waves)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not _profiling():
            return fn(*args, **kwargs)
        with torch.profiler.record_function(label):
            return fn(*args, **kwargs)
    return wrapper


@dataclass
class PhaseProbe:
    """What `install` attached, and what it could not find (for the manifest and the
    "not measured" notes)."""

    attached: dict[str, list[str]] = field(default_factory=dict)   # phase -> paths
    missing: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(attached=self.attached, missing=self.missing)


def _resolve(root: Any, dotted: str) -> tuple[Any, str] | None:
    """(owner, attribute) for `a.b.c`, or None if a link is missing."""
    *path, name = dotted.split(".")
    owner = root
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            return None
    return (owner, name) if callable(getattr(owner, name, None)) else None


def _wrap_module_call(module: torch.nn.Module, label: str) -> None:
    """A range from the module's forward pre-hook to its forward hook. Hooks, not a wrapped
    `forward`: vLLM compiles the inner model class and replaces its `__call__`, while the
    outer `...ForCausalLM` is called through `nn.Module.__call__`, which runs hooks."""
    stack: list[Any] = []

    def pre(_mod, _args):
        if _profiling():
            stack.append(torch.autograd.profiler.record_function(label).__enter__())
        else:
            stack.append(None)

    def post(_mod, _args, _out):
        rf = stack.pop() if stack else None
        if rf is not None:
            rf.__exit__(None, None, None)

    module.register_forward_pre_hook(pre)
    module.register_forward_hook(post, always_call=True)


def _wrap_result_method(owner: Any, name: str, method: str, label: str) -> None:
    """Wrap `method` on whatever `owner.name(...)` returns (when it has one)."""
    orig = getattr(owner, name)

    @functools.wraps(orig)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        out = orig(*args, **kwargs)
        inner = getattr(out, method, None)
        if callable(inner):
            try:
                setattr(out, method, _ranged(inner, label))
            except AttributeError:          # a frozen / slotted result: leave it unlabelled
                pass
        return out
    setattr(owner, name, wrapper)


def install(runner: Any, phase_map: PhaseMap) -> PhaseProbe:
    """Put the harness's phase ranges around `runner`'s methods (on the instance only:
    the class and the installed package stay untouched). Result-method wraps are installed
    first, so the method they wrap gets its own phase range around them."""
    probe = PhaseProbe()
    ordered = sorted(phase_map, key=lambda pp: "()." not in pp[1])
    for phase, path in ordered:
        label = STEP_LABEL if phase == "step" else PHASE_LABELS[phase]
        ok = False
        if path.endswith("()"):
            obj = runner
            for part in path[:-2].split("."):
                obj = getattr(obj, part, None) if obj is not None else None
            if isinstance(obj, torch.nn.Module):
                _wrap_module_call(obj, label)
                ok = True
        elif "()." in path:
            call, method = path.split("().", 1)
            found = _resolve(runner, call)
            if found is not None:
                _wrap_result_method(*found, method, label)
                ok = True
        else:
            found = _resolve(runner, path)
            if found is not None:
                owner, name = found
                setattr(owner, name, _ranged(getattr(owner, name), label))
                ok = True
        if ok:
            probe.attached.setdefault(phase, []).append(path)
        else:
            probe.missing.append(path)
    return probe

