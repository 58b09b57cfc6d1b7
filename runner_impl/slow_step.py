"""`slow-step:PCT`: a latency ruler, not a historic bug.

It adds PCT % of a measured step time as busy work inside the forward phase, so a harness
can measure the smallest slowdown it detects (its power curve). PCT is a share of the step
the engine records and the harness reports (the bundled engine's `StepRecord`, schedule to
output; on real vLLM the harness's own timing of `LLMEngine.step()`), fed back through
`observe_step`, less the ruler's own share. So slow-step:5 moves the measured step by 5 %,
whatever part of it the forward is (a share of the wrapped call's own host time would
move a step by less than PCT wherever the call is not the whole step).
The base is a median per step class (decode batch size; prefill tokens in powers of two): a
prefill step is never slowed by a decode step's size or the reverse. The first step of a
class adds nothing until its time is known (warmup covers most classes). A median, not a
mean: a GPU host stalls now and then for ~100 ms, stretching a few decode steps tenfold, and
a mean carries the ruler up with them (a decode step's mean is up to 1.2 times its median,
so a mean-sized ruler moves the median step by more than PCT; docs/detection-power.md). The median of a class's first
`_WARM_STEPS` steps starts it; after that each step moves it `_MEDIAN_STEP` (2 %) toward
itself, up or down (a streaming "frugal" median: O(1), no history, and a burst of tenfold
steps moves it by a few per cent, not by multiples).

The busy work is real, never a sleep outside the profiled range, and adds no host sync. It
runs at the start of the wrapped call, before the forward's launches (`run` says why):
- CPU: the host spins.
- CUDA: a GPU spin kernel (`torch.cuda._sleep`) of the same length is queued first, then
  the host spins. A step that starts on an idle device (a synchronous step) grows by the
  host spin, the GPU spin running under it; a step whose device still runs earlier work
  (async scheduling, vLLM) grows by the GPU spin ahead of its own kernels. The spin
  kernel's clock is learned from one timed spin whose CUDA events are read only once they
  have completed (`Event.query`); until then the ruler adds nothing.
Why both spins, and why no per-step CUDA events: a GPU spin alone hides under host time
where the host bounds the step, and per-step events cost host time of their own that moves
the step at any PCT (docs/detection-power.md, the rulers replaced).
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Hashable

import torch

_CALIBRATE_CYCLES = 2_000_000     # one spin of known length, timed to learn cycles per ms
_WARM_STEPS = 9                   # a class's first steps: their exact median is its base
_MEDIAN_STEP = 0.02               # then each step moves the base this share toward itself


def step_class(key: tuple) -> Hashable:
    """The class a step's time is averaged in: a decode step by its batch size (few
    values, each frequent), a prefill or mixed step by its token count's power of two
    (nearly every count is new)."""
    if len(key) == 2 and key[0] == "mixed":
        return ("mixed", int(key[1]).bit_length())
    return key


class SlowStep:
    def __init__(self, pct: float, device: torch.device) -> None:
        self.frac = pct / 100.0
        self.cuda = device.type == "cuda"
        # per step class: the median step time without the ruler, in ms, a streaming
        # estimate; the truth is what observe_step measured; _warm keeps a class's first
        # _WARM_STEPS times, which start it
        self.base_ms: dict[Hashable, float] = {}
        self._warm: dict[Hashable, list[float]] = {}
        # the class and busy time of the step under way, until the engine observes it
        # (the engine refuses the ruler with async scheduling, so there is one at a time)
        self._unobserved: tuple[Hashable, float] | None = None
        self.added_ms_total = 0.0                    # all busy time added, for tests/logs
        self.slowed_steps = 0
        self._cycles_per_ms: float | None = None     # the spin kernel's clock (CUDA)
        self._calib: tuple[Any, Any] | None = None

    def run(self, fn: Callable[..., Any], *args: Any, key: tuple = (), **kwargs: Any) -> Any:
        """The ruler's busy work for a step of class `key`, then `fn(*args, **kwargs)`;
        returns what `fn` returned.

        Before `fn`, not after: a synchronous step (the bundled engine's: the ruler refuses
        async scheduling) begins with an idle device, so a host spin there delays the
        whole step, host and device alike, by its full length. After `fn` it overlapped the
        device still running the forward just launched (a CUDA graph replay returns at
        once) and hid, leaving only the GPU spin, whose length rides on a clock learned
        once, so the slowdown it made moved from run to run (docs/notes/gpu-quick-gate-studies.md,
        "The ruler hid behind the GPU")."""
        cls = step_class(key)
        base = self.base_ms.get(cls)
        added = 0.0
        if self.cuda:
            self._learn_spin_clock()
        if base is not None and (not self.cuda or self._cycles_per_ms):
            added = self._busy(self.frac * base)
            self.added_ms_total += added
            self.slowed_steps += 1
        out = fn(*args, **kwargs)
        self._unobserved = (cls, added)
        return out

    def observe_step(self, duration_ms: float, key: tuple) -> float | None:
        """The engine's measured step: folded into its class's median
        less the busy time the ruler added to it; returns that busy time (ms), for the
        step's record, or None for a step the ruler did not see: one that ran no forward
        (an empty key), or of another class than the forward's."""
        if not key or self._unobserved is None:
            return None
        (cls, added), self._unobserved = self._unobserved, None
        if cls != step_class(key):                   # out of step: fold nothing
            return None
        self._fold(cls, duration_ms - added)
        return added

    def _fold(self, cls: Hashable, ms: float) -> None:
        """One step time into its class's streaming median."""
        if ms <= 0:
            return
        warm = self._warm.setdefault(cls, [])
        if len(warm) < _WARM_STEPS:
            warm.append(ms)
            self.base_ms[cls] = statistics.median(warm)
        elif ms > self.base_ms[cls]:
            self.base_ms[cls] *= 1 + _MEDIAN_STEP
        elif ms < self.base_ms[cls]:
            self.base_ms[cls] /= 1 + _MEDIAN_STEP

    def _busy(self, ms: float) -> float:
        """`ms` of busy work on the host, and on CUDA as long a spin queued on the GPU
        first; the host time it took (ms), launch included."""
        t0 = time.perf_counter()
        if self.cuda:
            torch.cuda._sleep(int(ms * self._cycles_per_ms))
        until = t0 + ms / 1e3
        t = t0
        while t < until:                             # busy: the core is taken, as by work
            t = time.perf_counter()
        return (t - t0) * 1e3

    def _learn_spin_clock(self) -> None:
        """Time one spin of known cycles with CUDA events, read without waiting."""
        if self._cycles_per_ms is not None:
            return
        if self._calib is None:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            torch.cuda._sleep(_CALIBRATE_CYCLES)
            b.record()
            self._calib = (a, b)
        elif self._calib[1].query():
            ms = self._calib[0].elapsed_time(self._calib[1])
            self._cycles_per_ms = _CALIBRATE_CYCLES / ms if ms > 0 else None
            self._calib = None
