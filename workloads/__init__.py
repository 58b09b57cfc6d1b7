"""Workloads mrbench replays. Each module defines a workload object with `name`,
`description`, a pydantic `Params` model, `engine_options(params)`, `prepare(params)` (load
or generate its items; BadInput on bad data) and `run(session, items, params)`."""
from __future__ import annotations

from typing import Any


def workloads() -> dict[str, Any]:
    from . import gsm8k, spec_decode, trace_replay, warmup_coverage
    return {w.name: w for w in (gsm8k.WORKLOAD, spec_decode.WORKLOAD, trace_replay.WORKLOAD,
                                warmup_coverage.WORKLOAD)}


def get_workload(name: str) -> Any:
    from mrbench.harness.errors import BadInput
    known = workloads()
    if name not in known:
        raise BadInput(f"unknown workload {name!r}; known: {', '.join(sorted(known))}")
    return known[name]
