"""`slow-step:PCT` on real vLLM: the latency ruler, not a historic bug.

`mrbench power` measures the smallest slowdown a suite detects by giving the candidate a
known one. On vLLM the ruler is busy work at the end of every engine step that ran the
model, inside the step as the harness times it (`VllmSession._step_engine` times
`LLMEngine.step()`: schedule, the runner's calls, output processing), lasting PCT % of that
step's own measured time. The step's tokens are stamped after it, so the step, each token's
ITL and each request's TPOT grow by PCT % of the step they fall in.

Why at the end, scaled by the step's own time: a slow step (a mixed prefill step, a host
stall) grows by PCT % as a typical one does, so every quantile of the step moves by about
PCT %, the P99 as much as the median (a ruler sized from a streaming median per step class
moved a step's tail less than its median, so the P99 gates' power was measured at a smaller
slowdown than named).

Host and device both. On a CUDA side the ruler also queues a device spin of the same
length (`torch.cuda._sleep`, calibrated in clock cycles per ms when the ruler is made) on
the current stream, behind the step's kernels. Under async scheduling a real-shape step is
two chains run side by side, the host's (schedule, launch, output processing) and the
GPU's (the forward and sampling); the step lasts as long as the longer one. A host spin
alone hides under queued device work where the GPU bounds the step (a real-shape model; the
figures are in docs/detection-power.md); a device spin alone hides under host time where
the host bounds it (the bundled tiny model). Both chains grown by the same share grow the longer one by it, so
the step moves by about PCT % wherever it is bound. The device spin adds no sync and no aten
op; it is one kernel launch, so it is left out of the profiled pass (the session is
auditing then): the ruler moves time, never counts. The run's `realized_pct` and
`ruler_added_pct` say what it moved.

Where vLLM runs the runners in its workers (tensor parallel, a PD pair with a process per
runner), the step is timed in the workers (`ranks.py`) and the ruler spins there, on
every rank at the end of its `sample_tokens`, for PCT % of that rank's step; a spin in the
engine core's process would fall outside the timed step.

Each slowed step row records the ruler's busy time (`ruler_ms`). Warmup, graph capture,
dummy runs and empty steps are never slowed: only serving steps go through the harness's
step, and only those that scheduled tokens spin.
"""
from __future__ import annotations

import time
from typing import Any

import torch

from ...faults import ruler_name


def device_cycles_per_ms() -> float:
    """Clock cycles of `torch.cuda._sleep` per ms on the current device, timed with CUDA
    events over a spin long enough (~20 ms at 2 GHz) that launch overhead is noise. It
    synchronizes: call it when the ruler is made, never inside a timed step."""
    torch.cuda._sleep(1_000_000)                 # the clock up from idle first
    cycles = 40_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / max(start.elapsed_time(end), 1e-3)


class StepRuler:
    """One engine session's ruler: PCT % of each slowed step's own time, spun at its end,
    on the host and, on a CUDA side, on the device too."""

    def __init__(self, pct: float, device: str = "cpu") -> None:
        self.pct = pct
        self.frac = pct / 100.0
        self.added_ms_total = 0.0        # all busy time added (ms), for tests and logs
        self.slowed_steps = 0
        self.device_spins = 0            # steps whose device spin was queued
        self.cycles_per_ms = (device_cycles_per_ms()
                              if device.startswith("cuda") and torch.cuda.is_available()
                              else None)

    def spin_after(self, t0: float, on_device: bool = True) -> float:
        """Busy-spin the host for `frac` of the time since `t0` (the step's start,
        `time.perf_counter()`), after queueing a device spin of the same length where the
        side is on CUDA and `on_device` (False in the profiled pass); the host's busy time
        added, in ms."""
        t = time.perf_counter()
        until = t + self.frac * (t - t0)
        if self.cycles_per_ms is not None and on_device:
            torch.cuda._sleep(max(1, int((until - t) * 1e3 * self.cycles_per_ms)))
            self.device_spins += 1
        start = t
        while t < until:                 # busy: the core is taken, as by work
            t = time.perf_counter()
        added = (t - start) * 1e3
        self.added_ms_total += added
        self.slowed_steps += 1
        return added

    def record(self, in_workers: bool = False) -> dict[str, Any]:
        """What was applied, for the manifest's fault records."""
        on_gpu = self.cycles_per_ms is not None
        return {"name": ruler_name(self.pct), "pct": self.pct,
                "wraps": ("each rank's sample_tokens, in vLLM's workers (the step as timed "
                          "there, ranks.py)" if in_workers else
                          "LLMEngine.step (the harness's timed engine step)"),
                "busy_work": f"host spin at the end of each engine step that scheduled "
                             f"tokens, {self.pct:g} % of that step's own measured time"
                             + (", and a device spin of the same length queued behind the "
                                "step's kernels (torch.cuda._sleep; not in the profiled "
                                "pass)" if on_gpu else "") + " (no sync, no op)",
                "device_cycles_per_ms": (round(self.cycles_per_ms) if on_gpu else None)}
