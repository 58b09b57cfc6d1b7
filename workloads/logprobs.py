"""Logprobs: GSM8K prompts whose requests ask for the top-N logprobs of every generated
token, in each of vLLM's two logprob modes, one entry each (`logprobs.raw`,
`logprobs.processed`), since the mode is an engine option.

- raw (`raw_logprobs`: the model's logits before any processing): greedy, so both runners
  produce the same tokens and their logprobs compare position by position;
- processed (`processed_logprobs`: the distribution sampled, after the temperature and the
  top-k mask): seeded sampling at a temperature != 1 with a top-k. Runners that share a
  sampler produce the same streams; others diverge after a few tokens, and only positions
  whose preceding tokens agree are compared (`logprobs_agreement`, harness/checks/logprobs.py).

The defaults are sized to the bundled model, which is so sure of GSM8K that below
temperature 1 the probability outside its top 8 tokens is under 1e-4 at nearly every
position: a processed logprob that left out the mask would agree within float32's
tolerance. At temperature 2 it is about 1e-2, so such a fault shows at every position.

The engine is asked for N + 1 logprobs so that the check sees where the N-th and the
(N + 1)-th are a near tie. Each request row carries them as JSON (`logprobs`: per token
[logprob, [[token id, logprob], ...]], rounded to 1e-6, below any tolerance), with
`logprobs_top_n` = N: what the check needs, never whole vocabularies.
"""
from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mrbench.contract import (
    Batch,
    Driver,
    EngineOptions,
    Outcome,
    Sampling,
    Session,
    TokenLogprob,
    WorkloadBase,
)

from .engine_shape import batch_engine
from .gsm8k import Item
from .gsm8k_problems import HELD_OUT_SEEDS, generate
from .gsm8k_scoring import PROMPT, STOP

MODES = {"raw": "raw_logprobs", "processed": "processed_logprobs"}
DIGITS = 6                       # logprobs are stored rounded to 1e-6 (tolerances >= 1e-4)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    modes: list[Literal["raw", "processed"]] = Field(["raw", "processed"], min_length=1)
    seed: int = HELD_OUT_SEEDS[3]            # problem-generator seed (never a training seed)
    limit: int = Field(12, ge=1)             # prompts
    top_n: int = Field(5, ge=1, le=19)       # N; the engine is asked for N + 1 (vLLM's
                                             # default max_logprobs is 20)
    temperature: float = Field(2.0, gt=0, le=2)   # processed: vLLM's bound
    top_k: int = Field(8, ge=0)              # processed; 0 = off
    sampling_seed: int = Field(0, ge=0)      # processed: request i's seed is this + i
    max_tokens: int = Field(32, ge=1)
    max_num_seqs: int = Field(8, ge=1)
    max_num_batched_tokens: int = Field(2048, ge=16)
    wave_size: int | None = Field(None, ge=1)     # None = max_num_seqs
    profile_limit: int = Field(2, ge=0)
    # The logits' dtype sets the check's tolerance (docs/checks.md): auto is bfloat16 on a
    # GPU, held to 0.1, which the processed fault's moves (<= 0.06 on the bundled model)
    # stay under; float32 holds a GPU run to 1e-4 as on CPU
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    mode: Literal["raw", "processed"] | None = None   # set by points(): this entry's mode

    @model_validator(mode="after")
    def _top_k_keeps_the_top_n(self) -> Params:
        """A top-k below N + 1 masks part of the top N + 1 to -inf, where the order is
        arbitrary and the set comparison would measure nothing."""
        if 0 < self.top_k <= self.top_n:
            raise ValueError(f"top_k ({self.top_k}) must be 0 (off) or > top_n "
                             f"({self.top_n}): the top N + 1 tokens must stay unmasked")
        return self


def encode(logprobs: list[TokenLogprob] | None) -> str | None:
    """A completion's logprobs as the row's JSON (None: the engine returned none)."""
    if logprobs is None:
        return None
    return json.dumps([[round(x.logprob, DIGITS),
                        [[t, round(lp, DIGITS)] for t, lp in x.top]] for x in logprobs])


class Logprobs(WorkloadBase):
    name = "logprobs"
    description = ("top-N logprobs of every generated token, raw (greedy) and processed "
                   "(temperature and top-k): the generated token's logprob and the top-N "
                   "set, candidate against baseline")
    Params = Params

    def points(self, p: Params) -> list[tuple[str, Params]]:
        return [(m, p.model_copy(update=dict(mode=m))) for m in dict.fromkeys(p.modes)]

    def engine_options(self, p: Params) -> EngineOptions:
        return batch_engine(p, dtype=p.dtype, logprobs_mode=MODES[p.mode or p.modes[0]])

    def prepare(self, p: Params) -> list[Item]:
        return [Item(q.question, q.answer) for q in generate(p.seed, p.limit)]

    def source(self, p: Params) -> str:
        return (f"generated:seed={p.seed}, top {p.top_n} (+1) logprobs; processed: "
                f"T={p.temperature:g}, top_k={p.top_k}, seeds from {p.sampling_seed}")

    def run(self, sessions: dict[str, Session], items: list[Item], p: Params, driver: Driver
            ) -> Outcome:
        mode = p.mode or p.modes[0]
        prompts = [PROMPT.format(question=it.question) for it in items]
        any_session = next(iter(sessions.values()))
        run_idx = [i for i, pr in enumerate(prompts) if any_session.fits(pr, p.max_tokens)]
        sampling = None if mode == "raw" else Sampling(
            p.temperature, top_k=p.top_k, seeds=tuple(p.sampling_seed + i for i in run_idx))
        batch = Batch([prompts[i] for i in run_idx], p.max_tokens, list(STOP),
                      p.wave_size or p.max_num_seqs, p.profile_limit, sampling,
                      logprobs=p.top_n + 1)
        results, comps, failed = driver.interleaved(sessions, batch)
        for side, res in results.items():
            for row, c in zip(res.requests, comps[side]):
                row.update(logprobs_mode=MODES[mode], logprobs_top_n=p.top_n,
                           logprobs=encode(c.logprobs))
                if sampling is not None:
                    # a sampled request (one sample of its prompt): runners whose samplers
                    # differ promise no equal streams, so their tokens are not judged equal
                    row.update(sample_group=row["req_index"],
                               sampling_seed=sampling.seeds[row["req_index"]])
        return results, failed


WORKLOAD = Logprobs()
