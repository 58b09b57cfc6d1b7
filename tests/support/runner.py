"""The small runner workload the parity, scheduling and fault tests share."""
from __future__ import annotations

import random

from mrbench.runner_impl import LLM, SamplingParams

# Small enough to force slot reuse (max_num_seqs) and chunked prefill (token budget).
# float64: a random-weight model has near-ties (top-2 gaps ~1e-6) that float32 batch shapes
# can flip; parity must test the runner logic, not rounding. test_model.py covers float32.
RUNNER_KW = dict(max_num_seqs=4, max_num_batched_tokens=24, block_size=8, max_model_len=256,
                 dtype="float64")
GREEDY = SamplingParams(temperature=0.0, max_tokens=24)


def make_prompts(n: int, seed: int = 0, lo: int = 3, hi: int = 100) -> list[list[int]]:
    """Token-id prompts of mixed lengths; ids avoid the special tokens 0..2."""
    rng = random.Random(seed)
    return [[rng.randrange(3, 96) for _ in range(rng.randrange(lo, hi))] for _ in range(n)]


def run(model_dir, prompts, params=GREEDY, **kw) -> list[list[int]]:
    """Token ids of each prompt's output."""
    llm = LLM(model_dir, **{**RUNNER_KW, **kw})
    return [o.token_ids for o in llm.generate(prompts, params)]
