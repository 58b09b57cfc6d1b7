"""Prefix caching: greedy few-shot GSM8K prompts that share a long preamble, asked twice.

Every prompt is lm-eval's few-shot GSM8K format: the same worked examples ("Question: ...
\\nAnswer: ... #### N", blank-line separated) and then its own question. With prefix
caching on (vLLM's `enable_prefix_caching`, on both targets), a request admitted after the
preamble's blocks were computed reuses them, and the second round, which repeats the first
round's prompts in later waves, finds nearly its whole prompt cached (less the last token,
which is always computed). Such a request comes to the runner with its first tokens
computed: its positions, slot mapping and attention start past 0, where a runner that
assumes a fresh prompt goes wrong.

Greedy, so token agreement against the baseline judges the cache hits; the state audit
watches the runner's state through the profiled pass (which replays first-round prompts,
all cached by then). Each side records its prefix-cache queries and hits in tokens and the
hit rate (`prefix_cache_queries`, `prefix_cache_hits`, `prefix_cache_hit_rate`), and
`prefix_cache_coverage` (harness/checks/kv_cache.py) says "not measured" for a side that
had no hit.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from mrbench.contract import BadInput, Driver, EngineOptions, Outcome, Session, WorkloadBase

from .engine_shape import batch_engine
from .gsm8k_problems import HELD_OUT_SEEDS, check_split, generate
from .gsm8k_scoring import PROMPT
from .prompts import serve_prompts

SHOT = "Question: {question}\nAnswer: {answer}\n\n"     # lm-eval gsm8k's few-shot example


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seed: int = HELD_OUT_SEEDS[0]            # the questions' generator seed
    shots_seed: int = HELD_OUT_SEEDS[5]      # the preamble's worked examples
    num_shots: int = Field(1, ge=1)          # the shortest of 32 problems of shots_seed
    limit: int = Field(4, ge=1)              # distinct questions
    rounds: int = Field(2, ge=1)             # times each prompt is asked, a round per pass
    max_tokens: int = Field(32, ge=1)
    max_num_seqs: int = Field(8, ge=1)
    # below two prompts (~250-330 tokens each), so admissions spread over steps and later
    # ones find the preamble an earlier one computed
    max_num_batched_tokens: int = Field(256, ge=16)
    block_size: int = Field(32, ge=1)        # vLLM on CPU takes multiples of 32
    wave_size: int = Field(4, ge=1)          # prompts per timed wave
    profile_limit: int = Field(2, ge=0)      # prompts in the profiled (audited) pass


def few_shot_prompts(p: Params) -> list[str]:
    """The rounds of prompts: the preamble of `num_shots` worked examples, then each
    question in lm-eval's GSM8K format; round 2 repeats round 1."""
    for seed in (p.seed, p.shots_seed):
        try:
            check_split(seed)
        except ValueError as e:
            raise BadInput(f"prefix-cache: {e}") from None
    pool = sorted(generate(p.shots_seed, 32), key=lambda q: len(q.question) + len(q.answer))
    preamble = "".join(SHOT.format(question=q.question, answer=q.answer)
                       for q in pool[:p.num_shots])
    once = [preamble + PROMPT.format(question=q.question) for q in generate(p.seed, p.limit)]
    return once * p.rounds


class PrefixCache(WorkloadBase):
    name = "prefix-cache"
    description = ("greedy few-shot GSM8K sharing one preamble, each prompt asked twice, "
                   "prefix caching on; hit rate per side")
    Params = Params

    def engine_options(self, p: Params) -> EngineOptions:
        return batch_engine(p, block_size=p.block_size, enable_prefix_caching=True,
                            state_audit=True)

    def prepare(self, p: Params) -> list[str]:
        return few_shot_prompts(p)

    def source(self, p: Params) -> str:
        return (f"generated:seed={p.seed} x {p.rounds} rounds, {p.num_shots}-shot preamble "
                f"from seed={p.shots_seed}")

    def run(self, sessions: dict[str, Session], items: list[str], p: Params, driver: Driver
            ) -> Outcome:
        results, failed = serve_prompts(sessions, items, p.max_tokens, p.wave_size,
                                        p.profile_limit, driver)
        for res in results.values():
            res.resolved["prefix_cache"] = dict(block_size=p.block_size)   # compare reads it
            queries = res.counters.get("prefix_cache_queries")
            if queries:
                res.counters["prefix_cache_hit_rate"] = (
                    res.counters.get("prefix_cache_hits", 0.0) / queries)
        return results, failed


WORKLOAD = PrefixCache()
