"""Step times of a session whose runners run in vLLM's workers (ranks.py), matched to the
session's own steps."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .session import VllmSession


def time_in_workers(s: VllmSession) -> None:
    """Where the runners run in vLLM's workers, a step's time is the runner's, taken in
    its worker: from the first rank's `execute_model` to the last rank's end of
    `sample_tokens`. Here the engine core only hands the batch to the workers, and
    with async scheduling its step call returns before they are done (docs/vllm-gpu.md, "A
    process per runner"). The session's and the workers' steps with tokens are matched in order;
    where their numbers differ, the steps keep the engine core's times and the run
    says how many (`worker_untimed_steps`). A PD step's KV transfer seconds come with
    its times (taken in the worker at the step's end, not by a call per step, which
    would stand between two steps on the path every token waits on)."""
    for name in s.engines:
        mine = [i for i, st in enumerate(s._steps[s._worker_timed:])
                if st.instance == name]
        per_rank = s.ranks.step_times(name)
        if not mine and not any(per_rank):
            continue
        if not per_rank or any(len(t) != len(mine) for t in per_rank):
            s._worker_untimed += len(mine)
            for i in mine:                       # their transfer time is unknown
                s._moves.pop(s._worker_timed + i, None)
            continue
        for j, i in enumerate(mine):
            k = s._worker_timed + i
            moved = s._moves.pop(k, None)
            if moved:
                s._share_transfer(moved, max(t[j][3] for t in per_rank))
            spun = [t[j][2] for t in per_rank if t[j][2] is not None]
            # this thread's clock covered the engine core's call, not the workers' step
            s._steps[k] = replace(s._steps[k],
                                     t_start=min(t[j][0] for t in per_rank),
                                     t_end=max(t[j][1] for t in per_rank),
                                     ruler_ms=max(spun) if spun else None,
                                     cpu_ms=None, invol_switches=None, vol_switches=None)
    s._worker_timed = len(s._steps)
