"""Sampled generation: GSM8K prompts sampled with vLLM's parameters and a seed per request,
each prompt sampled several times; one setting, or a sweep of named parameter sets.

Every other workload is greedy, so the sampler, its per-request random state, its filters
(top-k, top-p, min-p), its logit processors (logit bias, penalties) and their per-slot
state are never compared between runners there. Real MRv2 bugs lived here (penalty state
not reset on slot reuse, vLLM #34662; random noise shared where it must be independent,
vLLM #54282), and each parameter has its own code path, taken only when a request uses it.

`sets` sweeps parameter sets, each its own entry (`sampled.<set>`) with its own verdict, so
a bug in one parameter's path fails that parameter's entry: see `SETS`. Without `sets` the
entry samples with its own fields (`sampled`).

Two runners that share a sampler promise the same stream for the same seed, so their
tokens are compared as for greedy (`token_agreement`); an unseeded request is promised no
stream and is left out of it (with a count). Runners with different samplers (vLLM V1 and
V2) do not: their sampled *distributions* are compared instead (`sampled_distribution`,
harness/checks/correctness.py), per prompt over its samples. Each request row carries
`sample_group` (its prompt) and `sampling_seed` (None: unseeded) for that.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from mrbench.contract import Batch, Driver, EngineOptions, Outcome, Sampling, Session, WorkloadBase

from .engine_shape import batch_engine
from .gsm8k import GSM8K, Item
from .gsm8k_problems import HELD_OUT_SEEDS, generate
from .gsm8k_scoring import PROMPT, STOP

SetName = Literal["greedy", "temperature", "top-k", "top-p", "top-k-top-p", "min-p",
                  "penalties", "logit-bias", "mixed-seeds", "chunked"]

# Each set's sampling: the fields it names, every other sampling field off (`OFF`). Hot
# settings (T 2.0, vLLM's maximum), because the bundled model is so sure of GSM8K that a
# cooler one gives one stream from several seeds, and a bug in a filter needs streams to
# break; each filter at a bound where it removes tokens the temperature left likely.
SETS: dict[str, dict[str, Any]] = {
    "greedy": dict(temperature=0.0),
    "temperature": dict(temperature=2.0),
    "top-k": dict(temperature=2.0, top_k=20),
    "top-p": dict(temperature=2.0, top_p=0.99),
    # both binding (at T 2 the bundled model's top 20 hold about 98 % of the mass, and
    # the nucleus 80 % of that); mixed-seeds and chunked combine the two at bounds where
    # top-p cuts little (0.9999: dropping it moves at most 1e-4 of the mass a step)
    "top-k-top-p": dict(temperature=2.0, top_k=20, top_p=0.8),
    "min-p": dict(temperature=2.0, min_p=0.1),
    # strong enough that a previous occupant's counts change the next token
    "penalties": dict(temperature=2.0, repetition_penalty=1.3, frequency_penalty=0.8,
                      presence_penalty=0.8),
    # the bundled character tokenizer's ' ' (3), '1' (57), '\n' (66), '.' (67); other
    # vocabularies bias other tokens, which exercises the same path
    "logit-bias": dict(temperature=2.0, logit_bias={3: -4.0, 57: 3.0, 66: -2.0, 67: 2.0}),
    # every other request unseeded, in the same batches as the seeded ones
    "mixed-seeds": dict(temperature=2.0, top_k=64, top_p=0.9999, unseeded_every=2),
    # a 40-token step budget prefills each prompt (87-256 tokens) in >= 3 chunks while its
    # seeded stream is drawn (as quick's gsm8k-chunked, which is greedy)
    "chunked": dict(temperature=2.0, top_k=64, top_p=0.9999, max_num_batched_tokens=40,
                    min_prefill_chunks=3),
}
OFF: dict[str, Any] = dict(top_p=1.0, top_k=0, min_p=0.0, repetition_penalty=1.0,
                            frequency_penalty=0.0, presence_penalty=0.0, logit_bias={},
                            unseeded_every=0, min_prefill_chunks=None)
# Fields added after op-count references were stored: left out of a dump while at their
# defaults, so the references' parameter hashes (harness/record/references.py) of entries
# that do not use them still hold.
_LATER_FIELDS = ("min_p", "repetition_penalty", "frequency_penalty", "presence_penalty",
                 "logit_bias", "unseeded_every", "min_prefill_chunks", "sets", "set")


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seed: int = HELD_OUT_SEEDS[2]            # problem-generator seed (never a training seed)
    limit: int = Field(12, ge=1)             # prompts (problems)
    samples_per_prompt: int = Field(4, ge=2)  # requests per prompt, adjacent (one batch)
    temperature: float = Field(0.8, ge=0, le=2)  # vLLM's bounds; 0 = greedy
    top_p: float = Field(0.95, gt=0, le=1)
    top_k: int = Field(40, ge=0)             # 0 = off
    min_p: float = Field(0.0, ge=0, le=1)    # 0 = off
    repetition_penalty: float = Field(1.0, gt=0)        # 1 = off; prompt + output tokens
    frequency_penalty: float = Field(0.0, ge=-2, le=2)  # 0 = off; output tokens
    presence_penalty: float = Field(0.0, ge=-2, le=2)   # 0 = off; output tokens
    logit_bias: dict[int, float] = Field(default_factory=dict)   # token id -> bias
    unseeded_every: int = Field(0, ge=0)     # request i unseeded when i % n == n - 1; 0: none
    sampling_seed: int = Field(0, ge=0)      # request i's seed: sampling_seed + i
    max_tokens: int = Field(96, ge=1)
    max_num_seqs: int = Field(8, ge=1)
    max_num_batched_tokens: int = Field(2048, ge=16)
    wave_size: int | None = Field(None, ge=1)  # requests per timed wave; None = max_num_seqs
    profile_limit: int = Field(4, ge=0)
    # 3 = the entry is there to prefill prompts in >= 3 chunks (chunked_prefill_coverage
    # says "not measured" for a side that ran none)
    min_prefill_chunks: Literal[3] | None = None
    sets: list[SetName] | None = Field(None, min_length=1)  # a sweep: one entry per set
    set: SetName | None = None               # set by points(): the set this entry runs

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        out = handler(self)
        for name in _LATER_FIELDS:
            if getattr(self, name) == type(self).model_fields[name].get_default(
                    call_default_factory=True):
                out.pop(name, None)
        return out


class Sampled(WorkloadBase):
    name = "sampled"
    description = ("sampled GSM8K (vLLM's sampling parameters, one setting or a sweep of "
                   "named sets, a seed per request, several samples per prompt): streams "
                   "where the runners share a sampler, distributions where they do not")
    Params = Params

    def points(self, p: Params) -> list[tuple[str, Params]]:
        """No `sets`: the entry itself. Otherwise one point per set, named by it, with the
        set's sampling (and engine shape, for `chunked`); the sweep's list is left out of
        each point, so adding a set keeps the others' op-count references."""
        if p.sets is None:
            return [("", p)]
        return [(name, p.model_copy(update={**OFF, **SETS[name], "set": name, "sets": None}))
                for name in dict.fromkeys(p.sets)]

    def engine_options(self, p: Params) -> EngineOptions:
        return batch_engine(p, state_audit=True)

    def prepare(self, p: Params) -> list[Item]:
        return [Item(q.question, q.answer) for q in generate(p.seed, p.limit)]

    def source(self, p: Params) -> str:
        knobs = "".join(f", {k}={v:g}" for k, v in (
            ("min_p", p.min_p), ("repetition_penalty", p.repetition_penalty),
            ("frequency_penalty", p.frequency_penalty), ("presence_penalty", p.presence_penalty))
            if v != Params.model_fields[k].default)
        return (f"generated:seed={p.seed} x {p.samples_per_prompt} samples, T={p.temperature:g},"
                f" top_p={p.top_p:g}, top_k={p.top_k}{knobs}"
                + (f", logit_bias on {len(p.logit_bias)} tokens" if p.logit_bias else "")
                + f", seeds from {p.sampling_seed}"
                + (f", every {p.unseeded_every}th unseeded" if p.unseeded_every else ""))

    @staticmethod
    def _seed(p: Params, i: int) -> int | None:
        n = p.unseeded_every
        return None if n and i % n == n - 1 else p.sampling_seed + i

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
                            tuple(self._seed(p, i) for i in run_idx), p.min_p,
                            p.repetition_penalty, p.frequency_penalty, p.presence_penalty,
                            tuple(sorted(p.logit_bias.items())))
        batch = Batch([prompts[i] for i in run_idx], p.max_tokens, list(STOP), wave,
                      p.profile_limit, sampling)
        results, comps, failed = driver.interleaved(sessions, batch)
        for side, res in results.items():
            GSM8K._score(res, comps[side], reqs, run_idx)
            for r in res.requests:
                r["sample_group"] = r["req_index"] // n
                r["sampling_seed"] = self._seed(p, r["req_index"])
            # what compare's exact-stream check reads: a greedy set is one stream by design
            res.resolved["sampling_temperature"] = p.temperature
            if p.min_prefill_chunks:      # what compare's chunked_prefill_coverage reads
                res.resolved["chunked_prefill"] = dict(min_chunks=p.min_prefill_chunks)
        return results, failed


WORKLOAD = Sampled()
