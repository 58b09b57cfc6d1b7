"""The engine options most workloads share: the engine's batch limits from the workload's
own parameters.

Why one function: every workload whose Params carry `max_num_seqs` and
`max_num_batched_tokens` hands them to the engine unchanged; what differs between them (PD,
spec decode, a short KV cache, prefix caching, the state audit) is passed on top.
"""
from __future__ import annotations

from typing import Any

from mrbench.contract import EngineOptions


def batch_engine(p: Any, **more: Any) -> EngineOptions:
    """EngineOptions with `p.max_num_seqs` and `p.max_num_batched_tokens`, and `more`."""
    return EngineOptions(max_num_seqs=p.max_num_seqs,
                         max_num_batched_tokens=p.max_num_batched_tokens, **more)
