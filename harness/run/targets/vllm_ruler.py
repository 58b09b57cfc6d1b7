"""`slow-step:PCT` on real vLLM: the latency ruler, not a historic bug.

`mrbench power` measures the smallest slowdown a suite detects by giving the candidate a
known one. On vLLM the ruler wraps the model runner's `execute_model`, the step entry point
both runners have (the step's state updates, input preparation and the model call; V1
computes the logits there too; sampling is `sample_tokens`, outside it):
- V1 on CPU: `vllm.v1.worker.cpu_model_runner.CPUModelRunner` (it inherits V1's method);
- V1 on CUDA: `vllm.v1.worker.gpu_model_runner.GPUModelRunner`;
- V2 (CUDA only): `vllm.v1.worker.gpu.model_runner.GPUModelRunner`.
The busy work is the bundled ruler's own (`mrbench.runner_impl.slow_step.SlowStep`):
PCT % of the engine step the harness measures (`VllmSession._step_engine`
times `LLMEngine.step()`: schedule, the runner's calls, output processing) is added inside
the step, never a sleep. Each measured step is fed back (`observe_step`), less the ruler's
own part, into a streaming median per class of scheduled tokens, so slow-step:5 moves the
step the gate judges by about 5 %, whatever share of it `execute_model` is. Until
2026-11-27 the base was `execute_model`'s own host time: on the H200 with V2, slow-step:5
then moved the median step by +3.7 % and +1.1 % in two runs (nominal sizes,
docs/vllm-gpu.md). The busy work runs as the call starts: on CPU the host spins; on CUDA a
spin kernel (`torch.cuda._sleep`) of that length is queued on the runner's current stream
ahead of the call's work and the host spins as long, so the step grows whichever of host
and GPU bounds it (before the call, not after: after it, a host spin overlaps the GPU work
just launched and hides, SlowStep.run); the ruler adds no host sync, so V2's sync gate
stays clean. Each step row records the ruler's busy time (`ruler_ms`).

Two steps, as in vllm_dispatch: `install` wraps the class before the engine is built, in
the engine's process only, and the wrapper passes every call through; `arm` gives one
runner instance its own SlowStep once its engine is up. So warmup, graph capture, dummy
runs and empty steps are never slowed; each engine (a PD pair's two, or both sides of an
`--in-process` run) keeps its own timing state; a clean engine in the same process is
untouched.
"""
from __future__ import annotations

import functools
import importlib
from typing import Any, Callable

import torch

from mrbench.contract import BadInput
from mrbench.runner_impl.faults import SLOW_STEP, slow_step_pct
from mrbench.runner_impl.slow_step import SlowStep

_STATE = "_mrbench_slow_step"         # the runner instance's SlowStep, set by `arm`
_MARK = "_mrbench_ruler"              # on the class's wrapper: installed already
METHOD = "execute_model"


def split(faults: tuple[str, ...]) -> tuple[tuple[str, ...], float | None]:
    """(the historic fault names, the ruler's PCT or None). BadInput (one line) for a
    malformed `slow-step` entry or more than one."""
    historic: list[str] = []
    pcts: list[float] = []
    for name in faults:
        try:
            pct = slow_step_pct(name)
        except ValueError as e:
            raise BadInput(str(e)) from None
        if pct is None:
            historic.append(name)
        else:
            pcts.append(pct)
    if len(pcts) > 1:
        raise BadInput(f"one {SLOW_STEP}:PCT per side, got {len(pcts)}")
    return tuple(historic), (pcts[0] if pcts else None)


def runner_class_path(runner: str, device: str) -> tuple[str, str]:
    """(module, class) of the model runner vLLM builds for this runner on this device."""
    if runner == "v2":
        return "vllm.v1.worker.gpu.model_runner", "GPUModelRunner"
    if device == "cpu":
        return "vllm.v1.worker.cpu_model_runner", "CPUModelRunner"
    return "vllm.v1.worker.gpu_model_runner", "GPUModelRunner"


def _scheduled_tokens(args: tuple, kwargs: dict) -> int:
    sched = kwargs.get("scheduler_output", args[0] if args else None)
    return int(getattr(sched, "total_num_scheduled_tokens", 0) or 0)


def step_key(scheduled_tokens: int) -> tuple:
    """The ruler's class key of a step that scheduled this many tokens (the wrapper's and
    the step's feedback must name the same class)."""
    return ("mixed", int(scheduled_tokens))


def _wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def execute_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        ruler = self.__dict__.get(_STATE)
        if ruler is None or kwargs.get("dummy_run") or not _scheduled_tokens(args, kwargs):
            return orig(self, *args, **kwargs)
        # the step's class for the ruler's median: its token count (in powers of two)
        return ruler.run(orig, self, *args, key=step_key(_scheduled_tokens(args, kwargs)),
                         **kwargs)
    setattr(execute_model, _MARK, True)
    return execute_model


def wrap(cls: type) -> None:
    """Put the ruler's pass-through wrapper on `cls.execute_model` (inherited or its own);
    idempotent."""
    orig = getattr(cls, METHOD)
    if not getattr(orig, _MARK, False):
        setattr(cls, METHOD, _wrapper(orig))


def install(runner: str, device: str, pct: float) -> dict[str, Any]:
    """Wrap the class of the runner vLLM will build (in the engine's process, before the
    engine exists); what was applied, for the manifest's fault records."""
    module, name = runner_class_path(runner, device)
    try:
        cls = getattr(importlib.import_module(module), name)  # lazy: vLLM is optional
    except (ImportError, AttributeError) as e:
        raise RuntimeError(f"{SLOW_STEP}:{pct:g} on vllm:{runner} wraps {module}.{name}, "
                           f"which this vLLM lacks: {e}") from e
    wrap(cls)
    return {"name": f"{SLOW_STEP}:{pct:g}", "pct": pct, "wraps": f"{module}.{name}.{METHOD}",
            "busy_work": "host spin as the call starts" if device == "cpu" else
            "GPU spin kernel on the runner's stream and a host spin as long, as the call "
            "starts (no sync)"}


def arm(runner: Any, pct: float) -> None:
    """Give this runner instance its own ruler (on its own device); from its next step on,
    each step that runs the model is slowed by PCT % of the step the harness measures
    (fed back through `SlowStep.observe_step`)."""
    method = getattr(type(runner), METHOD, None)
    if not getattr(method, _MARK, False):
        raise RuntimeError(f"{SLOW_STEP}:{pct:g}: the engine built "
                           f"{type(runner).__module__}.{type(runner).__qualname__}, whose "
                           f"{METHOD} the ruler did not wrap")
    runner.__dict__[_STATE] = SlowStep(pct, torch.device(runner.device))


def ruler_of(runner: Any) -> SlowStep | None:
    """The runner instance's ruler (None when it is not armed)."""
    return runner.__dict__.get(_STATE)
