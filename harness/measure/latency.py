"""Per-request latency (vLLM's definitions) and per-step durations.

TTFT = first token time - arrival; TPOT = (last - first token time) / (output tokens - 1);
ITL = gaps between consecutive tokens (spec decode: tokens of one step share a time, so
gaps of 0 appear, as in vLLM); E2EL = last token time - arrival (vLLM's e2el; the column
is `e2e_ms`, as in every run's requests.csv). Milliseconds throughout.
"""
from __future__ import annotations

import math

from mrbench.contract import Completion, Step


def request_latency(c: Completion) -> dict:
    tt = c.token_times
    if not tt:
        return dict(ttft_ms=math.nan, tpot_ms=math.nan, e2e_ms=math.nan)
    return dict(ttft_ms=(tt[0] - c.arrival_time) * 1e3,
                tpot_ms=(tt[-1] - tt[0]) / (len(tt) - 1) * 1e3 if len(tt) > 1 else math.nan,
                e2e_ms=(tt[-1] - c.arrival_time) * 1e3)


def inter_token_latencies(c: Completion) -> list[float]:
    tt = c.token_times
    return [(b - a) * 1e3 for a, b in zip(tt, tt[1:])]


def step_rows(steps: list[Step]) -> list[dict]:
    """One row a step; `cpu_ms`, `invol_switches` and `vol_switches` are NaN where the
    target cannot read its stepping thread's clock; `ruler_ms` (the slow-step ruler's
    busy time) only where a step carried the ruler."""
    return [dict(instance=s.instance, step=s.index, t_start_s=s.t_start,
                 duration_ms=(s.t_end - s.t_start) * 1e3, num_reqs=s.num_reqs,
                 num_tokens=s.num_tokens, kind=s.kind,
                 cpu_ms=math.nan if s.cpu_ms is None else s.cpu_ms,
                 invol_switches=math.nan if s.invol_switches is None else s.invol_switches,
                 vol_switches=math.nan if s.vol_switches is None else s.vol_switches,
                 **({} if s.ruler_ms is None else dict(ruler_ms=s.ruler_ms)))
            for s in steps]
