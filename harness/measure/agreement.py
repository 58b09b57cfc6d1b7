"""Greedy token agreement between candidate and baseline, per request.

With greedy decoding both runners must emit the same tokens on the same weights; the first
position where they differ says at which decode step the candidate went wrong.
"""
from __future__ import annotations


def first_divergence(base: list[int], cand: list[int]) -> int:
    """Index of the first differing output token; -1 when the sequences are identical."""
    for i, (a, b) in enumerate(zip(base, cand)):
        if a != b:
            return i
    return -1 if len(base) == len(cand) else min(len(base), len(cand))
