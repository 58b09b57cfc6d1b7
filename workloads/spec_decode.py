"""Speculative-decoding latency: a sweep of k x proposer x batch size, candidate vs baseline
at each point.

Each point is its own engine shape (one entry in the results, id `<entry>.k2-ngram-b4`).
Per point: per-step latency P50/P90/P99 with CIs, ITL/TPOT, tokens/s, acceptance rate and
mean acceptance length (AL = 1 + accepted / drafts) with per-position rates, the state
audit (host mirror vs device truth under rejections) and op counts against the stored
reference (where a wasteful accept-count shows as extra ops in `sample`).
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mrbench.contract import Driver, EngineOptions, Outcome, Session

from .gsm8k_problems import HELD_OUT_SEEDS
from .prompts import GeneratedPrompts, serve_prompts


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ks: list[int] = Field([0, 1, 2, 4], min_length=1)
    # ngram / draft: the bundled runner and vLLM V1; eagle: vLLM (V2 speculates only with
    # eagle-family heads; the bundled model's head is runner_impl/assets/gsm8k-tiny-eagle)
    proposers: list[Literal["ngram", "draft", "eagle"]] = Field(["ngram", "draft"],
                                                                 min_length=1)
    batch_sizes: list[int] = Field([1, 4, 8], min_length=1)
    seed: int = HELD_OUT_SEEDS[1]
    limit: int = Field(32, ge=1)
    max_tokens: int = Field(320, ge=1)
    wave_size: int | None = Field(None, ge=1)     # None = 2 x batch size
    profile_limit: int = Field(4, ge=0)
    draft_model: str | None = None                # None: the side's own model drafts
    state_audit: bool = True
    # set by points(): the one engine shape of this run
    k: int | None = Field(None, ge=0, le=8)
    proposer: Literal["ngram", "draft", "eagle"] | None = None
    batch_size: int | None = Field(None, ge=1)


class SpecDecode(GeneratedPrompts):
    name = "spec-decode"
    description = "spec-decode latency sweep: k x proposer x batch size; AL, per-step P99"
    Params = Params

    def points(self, p: Params) -> list[tuple[str, Params]]:
        out = []
        for k in p.ks:
            for prop in (p.proposers if k else ["ngram"]):
                for bs in p.batch_sizes:
                    tag = f"k{k}-{prop}-b{bs}" if k else f"k0-b{bs}"
                    out.append((tag, p.model_copy(update=dict(k=k, proposer=prop,
                                                              batch_size=bs))))
        return out

    def engine_options(self, p: Params) -> EngineOptions:
        return EngineOptions(max_num_seqs=p.batch_size or p.batch_sizes[0],
                             num_speculative_tokens=p.ks[0] if p.k is None else p.k,
                             speculative_method=p.proposer or p.proposers[0],
                             draft_model=p.draft_model, state_audit=p.state_audit)

    def run(self, sessions: dict[str, Session], items: list[str], p: Params, driver: Driver
            ) -> Outcome:
        bs = p.batch_size or p.batch_sizes[0]
        return serve_prompts(sessions, items, p.max_tokens, p.wave_size or 2 * bs,
                             p.profile_limit, driver)


WORKLOAD = SpecDecode()
