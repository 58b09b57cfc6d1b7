"""Warmup coverage: which dispatch classes warmup ran, and which serving then used.

For each k, an engine is opened (its warmup runs), then a short mixed batch is served. A
serving class that warmup never ran pays its compile / CUDA-graph capture on a live request
(vLLM PR 40746: with k = 1 the warmup's prompt was a valid decode query, so the prefill path
was never warmed). The check is `unwarmed_dispatch` on every workload; this one exists to
sweep k where the classification depends on it.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mrbench.contract import Driver, EngineOptions, Outcome, Session

from .gsm8k_problems import HELD_OUT_SEEDS
from .prompts import GeneratedPrompts, serve_prompts


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ks: list[int] = Field([0, 1, 2, 3, 4], min_length=1)
    seed: int = HELD_OUT_SEEDS[2]
    limit: int = Field(4, ge=1)
    max_tokens: int = Field(16, ge=2)
    max_num_seqs: int = Field(4, ge=1)
    # one engine per k x proposer (k = 0: one, without drafts). ngram / draft: the bundled
    # runner and vLLM V1; eagle: vLLM (V2 speculates only with eagle-family heads)
    proposers: list[Literal["ngram", "draft", "eagle"]] = Field(["ngram"], min_length=1)
    # set by points(): the one engine shape of this run
    k: int | None = Field(None, ge=0, le=8)
    speculative_method: Literal["ngram", "draft", "eagle"] = "ngram"


class WarmupCoverage(GeneratedPrompts):
    name = "warmup"
    description = "warmup coverage: dispatch classes warmed vs served, for k in 0..4"
    Params = Params
    needs = frozenset({"dispatch_log"})     # the target must report warmup's dispatch classes

    def points(self, p: Params) -> list[tuple[str, Params]]:
        out = []
        for k in p.ks:
            for prop in (p.proposers if k else [p.proposers[0]]):
                tag = f"k{k}-{prop}" if k else "k0"
                out.append((tag, p.model_copy(update=dict(k=k, speculative_method=prop))))
        return out

    def engine_options(self, p: Params) -> EngineOptions:
        return EngineOptions(max_num_seqs=p.max_num_seqs,
                             num_speculative_tokens=p.ks[0] if p.k is None else p.k,
                             speculative_method=p.speculative_method)

    def run(self, sessions: dict[str, Session], items: list[str], p: Params, driver: Driver
            ) -> Outcome:
        # One wave of every prompt, no profiled steps: only the dispatch classes matter.
        return serve_prompts(sessions, items, p.max_tokens, len(items), 0, driver)


WORKLOAD = WarmupCoverage()
