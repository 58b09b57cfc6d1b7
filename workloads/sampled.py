"""Sampled generation: GSM8K prompts at temperature > 0 with top-k / top-p and a seed per
request, each prompt sampled several times.

Every other workload is greedy, so the sampler, its per-request random state and the
top-k / top-p masks are never compared between runners there. Real MRv2 bugs lived here
(penalty state not reset on slot reuse, vLLM #34662; random noise shared where it must be
independent, vLLM #54282).

Two runners that share a sampler promise the same stream for the same seed, so their
tokens are compared as for greedy (`token_agreement`). Runners with different samplers
(vLLM V1 and V2) do not: their sampled *distributions* are compared instead
(`sampled_distribution`, harness/checks/correctness.py), per prompt over its samples. Each request
row carries `sample_group` (its prompt) for that.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from mrbench.contract import Batch, Driver, EngineOptions, Outcome, Sampling, Session, WorkloadBase

from .gsm8k import GSM8K, Item
from .gsm8k_problems import HELD_OUT_SEEDS, generate
from .gsm8k_scoring import PROMPT, STOP


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seed: int = HELD_OUT_SEEDS[2]            # problem-generator seed (never a training seed)
    limit: int = Field(12, ge=1)             # prompts (problems)
    samples_per_prompt: int = Field(4, ge=2)  # requests per prompt, adjacent (one batch)
    temperature: float = Field(0.8, gt=0, le=2)  # vLLM's bound
    top_p: float = Field(0.95, gt=0, le=1)
    top_k: int = Field(40, ge=0)             # 0 = off
    sampling_seed: int = Field(0, ge=0)      # request i's seed: sampling_seed + i
    max_tokens: int = Field(96, ge=1)
    max_num_seqs: int = Field(8, ge=1)
    max_num_batched_tokens: int = Field(2048, ge=16)
    wave_size: int | None = Field(None, ge=1)  # requests per timed wave; None = max_num_seqs
    profile_limit: int = Field(4, ge=0)


class Sampled(WorkloadBase):
    name = "sampled"
    description = ("sampled GSM8K (temperature, top-k, top-p, a seed per request, several "
                   "samples per prompt): streams where the runners share a sampler, "
                   "distributions where they do not")
    Params = Params

    def engine_options(self, p: Params) -> EngineOptions:
        return EngineOptions(max_num_seqs=p.max_num_seqs,
                             max_num_batched_tokens=p.max_num_batched_tokens,
                             state_audit=True)

    def prepare(self, p: Params) -> list[Item]:
        return [Item(q.question, q.answer) for q in generate(p.seed, p.limit)]

    def source(self, p: Params) -> str:
        return (f"generated:seed={p.seed} x {p.samples_per_prompt} samples, T={p.temperature:g},"
                f" top_p={p.top_p:g}, top_k={p.top_k}, seeds from {p.sampling_seed}")

    def run(self, sessions: dict[str, Session], items: list[Item], p: Params, driver: Driver
            ) -> Outcome:
        n = p.samples_per_prompt
        # A prompt's samples are adjacent, so they share a batch (and a wave: the wave size
        # is rounded to whole prompts): noise shared across rows shows as equal streams.
        reqs = [it for it in items for _ in range(n)]
        prompts = [PROMPT.format(question=it.question) for it in reqs]
        any_session = next(iter(sessions.values()))
        run_idx = [i for i, pr in enumerate(prompts) if any_session.fits(pr, p.max_tokens)]
        wave = max(n, (p.wave_size or p.max_num_seqs) // n * n)
        sampling = Sampling(p.temperature, p.top_p, p.top_k,
                            tuple(p.sampling_seed + i for i in run_idx))
        batch = Batch([prompts[i] for i in run_idx], p.max_tokens, list(STOP), wave,
                      p.profile_limit, sampling)
        results, comps, failed = driver.interleaved(sessions, batch)
        for side, res in results.items():
            GSM8K._score(res, comps[side], reqs, run_idx)
            for r in res.requests:
                r["sample_group"] = r["req_index"] // n
                r["sampling_seed"] = p.sampling_seed + r["req_index"]
        return results, failed


WORKLOAD = Sampled()
