"""Drive one workload on one side: a timed pass, then a short profiled pass.

The timed pass runs unprofiled so latency is not distorted; the profiled pass repeats the
first `profile_limit` prompts under torch.profiler (counts are per step and deterministic,
so a short pass is enough). Warmup ran when the session opened, before either pass.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from .collectors.latency import inter_token_latencies, request_latency, step_rows
from .collectors.profiler import count_per_step, profiled
from .targets.base import Completion, Session


@dataclass
class SideResult:
    """Everything one side produced for one workload; tables are lists of row dicts."""

    requests: list[dict] = field(default_factory=list)
    itl: list[dict] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    profile: list[dict] = field(default_factory=list)     # per profiled step
    audits: list[dict] = field(default_factory=list)
    tokens: list[list[int]] = field(default_factory=list)
    resolved: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0


def drive_batch(session: Session, prompts: list[str], max_tokens: int, stop: list[str],
                profile_limit: int, device: str) -> tuple[SideResult, list[Completion]]:
    """All prompts arrive at once (offline batch, like `vllm bench throughput`)."""
    res = SideResult(resolved=session.resolved())
    session.reset_steps()
    t0 = time.perf_counter()
    comps = session.generate(prompts, max_tokens, stop)
    res.wall_s = time.perf_counter() - t0
    for i, c in enumerate(comps):
        res.requests.append(dict(req_index=i, prompt_tokens=len(c.prompt_token_ids),
                                 output_tokens=len(c.token_ids), finish_reason=c.finish_reason,
                                 kv_handoff_ms=None if c.kv_handoff_s is None
                                 else c.kv_handoff_s * 1e3, **request_latency(c)))
        res.itl.extend(dict(req_index=i, itl_ms=x) for x in inter_token_latencies(c))
        res.tokens.append(c.token_ids)
    res.steps = step_rows(session.steps())
    if profile_limit > 0:
        session.reset_steps()
        session.auditing = True      # state audits read the device: only in this pass
        with profiled(device) as prof:
            session.generate(prompts[:profile_limit], max_tokens, stop)
        session.auditing = False
        counts = count_per_step(prof.events, session.step_label, session.phase_labels)
        steps = step_rows(session.steps())
        for row, st in zip(counts, steps):        # both in time order
            row.update(instance=st["instance"], kind=st["kind"], num_reqs=st["num_reqs"])
        res.profile = counts
        res.audits = [asdict(a) for a in session.audits()]
    return res, comps
