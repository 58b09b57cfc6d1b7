"""`slow-step:PCT`: a latency ruler, not a historic bug.

It adds PCT % of the step's own forward time as extra busy work inside the forward phase,
so a harness can measure the smallest slowdown it detects (its power curve). The cost is
real work on the device that runs the forward, never a sleep outside the profiled range:
- CPU: the forward is synchronous, so its wall time is its cost; the host then spins for
  PCT % of it.
- CUDA: a GPU spin kernel (`torch.cuda._sleep`) of PCT % of the forward's GPU time,
  measured with CUDA events and read only once they have completed (`Event.query`), so
  the ruler adds no host synchronisation of its own. Until both the forward time and the
  spin kernel's clock are known (a few steps into warmup), it adds nothing.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import torch

_CALIBRATE_CYCLES = 2_000_000     # one spin of known length, timed to learn cycles per ms


class SlowStep:
    def __init__(self, pct: float, device: torch.device) -> None:
        self.frac = pct / 100.0
        self.cuda = device.type == "cuda"
        self._fwd_ms: float | None = None            # EMA of the forward's GPU time
        self._pending: list[tuple[Any, Any]] = []    # (start, end) events not yet read
        self._cycles_per_ms: float | None = None
        self._calib: tuple[Any, Any] | None = None

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)`, then the ruler's busy work; returns what `fn` returned."""
        if self.cuda:
            return self._run_cuda(fn, *args, **kwargs)
        return self._run_cpu(fn, *args, **kwargs)

    def _run_cpu(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        t1 = time.perf_counter()
        until = t1 + self.frac * (t1 - t0)
        while time.perf_counter() < until:           # busy: the core is taken, as by work
            pass
        return out

    def _run_cuda(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self._read_done()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn(*args, **kwargs)
        end.record()
        self._pending.append((start, end))
        if self._cycles_per_ms is None and self._calib is None:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            torch.cuda._sleep(_CALIBRATE_CYCLES)
            b.record()
            self._calib = (a, b)
        elif self._cycles_per_ms and self._fwd_ms:
            torch.cuda._sleep(int(self.frac * self._fwd_ms * self._cycles_per_ms))
        return out

    def _read_done(self) -> None:
        """Fold in the timings whose events have completed; never waits."""
        while self._pending and self._pending[0][1].query():
            s, e = self._pending.pop(0)
            ms = s.elapsed_time(e)
            self._fwd_ms = ms if self._fwd_ms is None else 0.8 * self._fwd_ms + 0.2 * ms
        del self._pending[:-64]                      # never grow without bound
        if self._calib is not None and self._calib[1].query():
            ms = self._calib[0].elapsed_time(self._calib[1])
            self._cycles_per_ms = _CALIBRATE_CYCLES / ms if ms > 0 else None
            self._calib = None
