"""Workloads mrbench replays. Each module defines one `Workload` (`mrbench.contract`): a
pydantic `Params` model, `engine_options(params)`, `prepare(params)` (load or generate its
items; BadInput on bad data), `run(sessions, items, params, driver)`, and optionally a sweep
(`points`) and an up-front check of its items (`check_items`).

This package imports only `mrbench.contract` of the rest of mrbench (an import-linter
contract checks it); the harness reaches workloads only through `workloads()` and
`get_workload()` here, plus the GSM8K-format prompts that `mrbench steps` records with.
"""
from __future__ import annotations

from mrbench.contract import BadInput, Workload

from . import (
    gsm8k,
    logprobs,
    preemption,
    prefix_cache,
    sampled,
    spec_decode,
    trace_replay,
    warmup_coverage,
)
from .gsm8k_problems import HELD_OUT_SEEDS
from .prompts import STOP, gsm8k_prompts

__all__ = ["workloads", "get_workload", "HELD_OUT_SEEDS", "STOP", "gsm8k_prompts"]

_ALL: tuple[Workload, ...] = (gsm8k.WORKLOAD, logprobs.WORKLOAD, sampled.WORKLOAD,
                              spec_decode.WORKLOAD, trace_replay.WORKLOAD,
                              warmup_coverage.WORKLOAD, preemption.WORKLOAD,
                              prefix_cache.WORKLOAD)


def workloads() -> dict[str, Workload]:
    """Every shipped workload by name."""
    return {w.name: w for w in _ALL}


def get_workload(name: str) -> Workload:
    """The workload called `name`, or BadInput listing the known ones."""
    known = workloads()
    if name not in known:
        raise BadInput(f"unknown workload {name!r}; known: {', '.join(sorted(known))}")
    return known[name]
