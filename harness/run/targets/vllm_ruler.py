"""`slow-step:PCT` on real vLLM: the latency ruler, not a historic bug.

`mrbench power` measures the smallest slowdown a suite detects by giving the candidate a
known one. On vLLM the ruler is host busy work at the end of every engine step that ran the
model, inside the step as the harness times it (`VllmSession._step_engine` times
`LLMEngine.step()`: schedule, the runner's calls, output processing), lasting PCT % of that
step's own measured time. The step's tokens are stamped after it, so the step, each token's
ITL and each request's TPOT grow by PCT % of the step they fall in.

Why at the end, scaled by the step's own time: a slow step (a mixed prefill step, a host
stall) grows by PCT % as a typical one does, so every quantile of the step moves by about
PCT %, the P99 as much as the median. Until 2026-11-28 the ruler spun before the runner's
`execute_model`, for PCT % of a streaming median per step class; a step's tail then moved
less than its median (on the H200, slow-step:10 moved P99 ITL +6.2 %), so the power of the
P99 gates was measured at a smaller slowdown than named. The busy work is a host spin: it
adds no sync and no op (the count gates stay clean), and it lengthens the step wherever the
host bounds it. Where the GPU bounds a step (async scheduling with a large model), part of
it can hide under queued device work; the run's `realized_pct` and `ruler_added_pct` say
what it moved.

Where vLLM runs the runners in its workers (tensor parallel, a PD pair with a process per
runner), the step is timed in the workers (`vllm_ranks.py`) and the ruler spins there, on
every rank at the end of its `sample_tokens`, for PCT % of that rank's step; a spin in the
engine core's process would fall outside the timed step.

Each slowed step row records the ruler's busy time (`ruler_ms`). Warmup, graph capture,
dummy runs and empty steps are never slowed: only serving steps go through the harness's
step, and only those that scheduled tokens spin.
"""
from __future__ import annotations

import time
from typing import Any

from mrbench.contract import BadInput
from mrbench.runner_impl.faults import SLOW_STEP, slow_step_pct


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


class StepRuler:
    """One engine session's ruler: PCT % of each slowed step's own time, spun at its end."""

    def __init__(self, pct: float) -> None:
        self.pct = pct
        self.frac = pct / 100.0
        self.added_ms_total = 0.0        # all busy time added (ms), for tests and logs
        self.slowed_steps = 0

    def spin_after(self, t0: float) -> float:
        """Busy-spin the host for `frac` of the time since `t0` (the step's start,
        `time.perf_counter()`); the busy time added, in ms."""
        t = time.perf_counter()
        until = t + self.frac * (t - t0)
        start = t
        while t < until:                 # busy: the core is taken, as by work
            t = time.perf_counter()
        added = (t - start) * 1e3
        self.added_ms_total += added
        self.slowed_steps += 1
        return added

    def record(self, in_workers: bool = False) -> dict[str, Any]:
        """What was applied, for the manifest's fault records."""
        return {"name": f"{SLOW_STEP}:{self.pct:g}", "pct": self.pct,
                "wraps": ("each rank's sample_tokens, in vLLM's workers (the step as timed "
                          "there, vllm_ranks.py)" if in_workers else
                          "LLMEngine.step (the harness's timed engine step)"),
                "busy_work": f"host spin at the end of each engine step that scheduled "
                             f"tokens, {self.pct:g} % of that step's own measured time "
                             f"(no sync, no op)"}
