"""Batch classification: which compiled path (CUDA graph, kernel set) a step runs on.

A batch is *uniform decode* when every request has exactly 1 + k query tokens; those
batches take the decode path (CUDA graphs on GPU). Everything else takes the general
(mixed prefill/decode) path. Warmup must exercise every key serving will use.
"""
from __future__ import annotations

import numpy as np


def get_uniform_token_count(num_scheduled: np.ndarray) -> int | None:
    """The common query length if all rows share one, else None (vLLM's rule)."""
    if len(num_scheduled) and (num_scheduled == num_scheduled[0]).all():
        return int(num_scheduled[0])
    return None


def dispatch_key(num_scheduled: np.ndarray, k: int) -> tuple[str, int]:
    """("uniform_decode", num_reqs) or ("mixed", num_tokens)."""
    if get_uniform_token_count(num_scheduled) == 1 + k:
        return ("uniform_decode", len(num_scheduled))
    return ("mixed", int(num_scheduled.sum()))


def is_prefill_key(key: tuple) -> bool:
    return bool(key) and key[0] == "mixed"
