"""Preemption: greedy GSM8K prompts through a KV cache that is short on purpose.

Every other workload's engine has KV blocks for all its slots at the full context, so its
scheduler never preempts and no request is ever resumed. Here the KV cache holds a few
requests' worth (`num_kv_blocks` blocks of `block_size` tokens; on the vllm target vLLM's
`num_gpu_blocks_override` and `block_size`): running requests outgrow it, and the scheduler
preempts the newest, frees its blocks and later resumes it by recomputing its prompt and
the outputs it had (recompute preemption, vLLM V1's only mode). A resumed request comes to
the runner as a new one whose prefill is longer than its prompt, into a slot another
request held: where MRv2-style runners have gone wrong (vLLM PR 26385 and its kin).

Greedy, so token agreement against the baseline judges the resumed requests; the state
audit watches the runner's state through the profiled pass. Each side counts its
preemptions over the timed waves (`num_preemptions`), and `preemption_coverage`
(harness/checks/kv_cache.py) says "not measured" for a side that had none.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from mrbench.contract import BadInput, Driver, EngineOptions, Outcome, Session

from .engine_shape import batch_engine
from .gsm8k_problems import HELD_OUT_SEEDS
from .prompts import GeneratedPrompts, serve_prompts


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # problem-generator seed (never a training seed); of the first four held-out seeds, the
    # one whose first 8 prompts preempt most (4) through the default cache, in ~180 steps
    seed: int = HELD_OUT_SEEDS[2]
    limit: int = Field(8, ge=1)              # prompts
    max_tokens: int = Field(48, ge=1)
    max_num_seqs: int = Field(8, ge=1)
    max_num_batched_tokens: int = Field(2048, ge=16)
    # The KV cache: 17 blocks of 32 tokens hold one full-context request of the bundled model
    # (512 tokens) and vLLM's null block, and about three of these requests at once
    num_kv_blocks: int = Field(17, ge=2)
    block_size: int = Field(32, ge=1)        # vLLM on CPU takes multiples of 32
    wave_size: int | None = Field(None, ge=1)  # prompts per timed wave; None = all at once
    profile_limit: int = Field(2, ge=0)      # prompts in the profiled (audited) pass


class Preemption(GeneratedPrompts):
    name = "preemption"
    description = ("greedy GSM8K through a KV cache short on purpose: the scheduler preempts "
                   "and resumes requests (recompute); preemptions counted per side")
    Params = Params

    def engine_options(self, p: Params) -> EngineOptions:
        return batch_engine(p, num_kv_blocks=p.num_kv_blocks, block_size=p.block_size,
                            state_audit=True)

    def check_items(self, p: Params, items: list[str], context_len: int) -> None:
        """The cache must hold one request at the full context beside vLLM's null block:
        vLLM refuses to start otherwise, and the bundled engine refuses such a prompt."""
        if (p.num_kv_blocks - 1) * p.block_size < context_len:
            raise BadInput(f"preemption: num_kv_blocks {p.num_kv_blocks} x block_size "
                           f"{p.block_size} cannot hold one request at the model's context "
                           f"of {context_len} tokens beside vLLM's null block; need "
                           f"num_kv_blocks >= {-(-context_len // p.block_size) + 1}")

    def run(self, sessions: dict[str, Session], items: list[str], p: Params, driver: Driver
            ) -> Outcome:
        results, failed = serve_prompts(sessions, items, p.max_tokens,
                                        p.wave_size or len(items), p.profile_limit, driver)
        for res in results.values():          # what compare's preemption_coverage reads
            res.resolved["preemption"] = dict(num_kv_blocks=p.num_kv_blocks,
                                              block_size=p.block_size)
        return results, failed


WORKLOAD = Preemption()
