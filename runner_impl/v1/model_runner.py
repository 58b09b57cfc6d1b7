"""The V1 reference runner: obviously correct over clever.

No persistent slots, no host mirror, no device-resident token state: every step the batch
is rebuilt from per-request Python lists, the scheduler's num_computed_tokens is used as
is, and speculative verification is a plain loop. It shares only the model and the
sampling distribution code with V2, so agreement between the two means something.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..config import EngineConfig
from ..engine.outputs import ModelRunnerOutput, SchedulerOutput
from ..logprobs import TokenLogprobs, compute, unpack
from ..model.llama import AttentionMetadata, LlamaForCausalLM
from ..sampler import BatchParams, make_generator, row_noise, sample, target_probs
from ..sampling_params import SamplingParams


@dataclass
class _Req:
    token_ids: list[int]           # prompt + outputs (the newest token has no KV yet)
    prompt_len: int                # token_ids[:prompt_len] is the prompt (penalties read it)
    block_ids: list[int]
    num_computed: int
    prefill_len: int
    params: SamplingParams
    generator: torch.Generator
    drafts: list[int] = field(default_factory=list)        # being verified / fed this step
    drafts_next: list[int] = field(default_factory=list)   # proposed for the next step
    draft_probs: torch.Tensor | None = None                # q(x) of drafts_next (sampled drafts)
    draft_computed: int = 0        # positions with valid draft-model KV


def ngram_propose(tokens: list[int], k: int, nmin: int, nmax: int) -> list[int]:
    """Latest earlier occurrence of the last n tokens with k tokens after it."""
    L = len(tokens)
    drafts = [tokens[-1]] * k
    for n in range(nmin, nmax + 1):
        if L <= n:
            break
        tail = tokens[L - n:]
        for start in range(L - n - k, -1, -1):
            if tokens[start:start + n] == tail:
                drafts = tokens[start + n:start + n + k]
                break
    return drafts


class ModelRunnerV1:
    name = "v1"

    def __init__(self, cfg: EngineConfig, model: LlamaForCausalLM, kv_caches: list[torch.Tensor],
                 max_model_len: int, max_blocks_per_req: int,
                 draft: tuple[LlamaForCausalLM, list[torch.Tensor]] | None = None) -> None:
        self.cfg, self.model, self.kv_caches = cfg, model, kv_caches
        self.k = cfg.num_speculative_tokens
        self.bs = cfg.block_size
        self.max_blocks = max_blocks_per_req
        self.device = cfg.torch_device
        self.draft = draft if (self.k and cfg.speculative_method == "draft") else None
        self.reqs: dict[str, _Req] = {}
        self.phase = "serve"
        self.dispatch_log: list[tuple[str, tuple]] = []

    def _meta(self, rows: list[tuple[_Req, int, int]]) -> tuple[list[int], AttentionMetadata]:
        """rows: (request, first position, number of tokens) -> input ids and metadata."""
        ids, pos, slots, trow, toff, qsl, seq_lens, tables = [], [], [], [], [], [0], [], []
        for r, (req, start, n) in enumerate(rows):
            toks = req.token_ids + req.drafts
            for j in range(n):
                p = start + j
                ids.append(toks[p] if p < len(toks) else 0)
                pos.append(p)
                slots.append(req.block_ids[p // self.bs] * self.bs + p % self.bs)
                trow.append(r)
                toff.append(j)
            qsl.append(qsl[-1] + n)
            seq_lens.append(start + n)
            tables.append(req.block_ids + [0] * (self.max_blocks - len(req.block_ids)))
        t = lambda x: torch.tensor(x, dtype=torch.int64, device=self.device)  # noqa: E731
        meta = AttentionMetadata(
            query_start_loc=t(qsl), seq_lens=t(seq_lens), block_table=t(tables),
            slot_mapping=t(slots), token_row=t(trow), token_offset=t(toff), positions=t(pos),
            max_query_len=max(n for _, _, n in rows), max_seq_len=max(seq_lens),
            query_lens_cpu=[n for _, _, n in rows])
        return ids, meta

    # One step = prepare -> forward -> sample -> postprocess, one method each, so a harness
    # can put its own profiler ranges around them (mrbench: harness/measure/phases.py, BUNDLED_V1).
    @torch.inference_mode()
    def execute_model(self, sched: SchedulerOutput) -> ModelRunnerOutput:
        prepared = self._prepare(sched)
        if prepared is None:
            return ModelRunnerOutput([], [], [])
        req_ids, reqs, ids, meta, samples = prepared
        self.dispatch_log.append((self.phase, ("v1", len(ids))))
        logits = self._forward(reqs, ids, meta)
        sampled, logprobs = self._sample(reqs, logits, samples)
        drafts = self._postprocess(reqs, sampled)
        return ModelRunnerOutput(req_ids, sampled, drafts, ("v1", len(ids)), logprobs)

    def _prepare(self, sched: SchedulerOutput
                 ) -> tuple[list[str], list[_Req], list[int], AttentionMetadata, list[bool]] | None:
        """Rebuild the batch from the per-request lists; None for an empty step."""
        for req_id in sched.finished_req_ids | sched.preempted_req_ids:
            self.reqs.pop(req_id, None)
        for new in sched.scheduled_new_reqs:
            self.reqs[new.req_id] = _Req(
                list(new.all_token_ids), len(new.prompt_token_ids), list(new.block_ids),
                new.num_computed_tokens,
                new.prefill_len, new.sampling_params,
                make_generator(new.seed, self.device),
                draft_computed=new.num_computed_tokens)
        c = sched.scheduled_cached_reqs
        for req_id, nc, blocks in zip(c.req_ids, c.num_computed_tokens, c.new_block_ids):
            self.reqs[req_id].num_computed = nc
            self.reqs[req_id].block_ids += blocks
        if not sched.total_num_scheduled_tokens:
            return None
        req_ids = sched.req_ids
        reqs = [self.reqs[r] for r in req_ids]
        for rid, req in zip(req_ids, reqs):
            req.drafts = list(sched.scheduled_spec_decode_tokens.get(rid, []))
        nsched = [sched.num_scheduled_tokens[r] for r in req_ids]
        ids, meta = self._meta([(q, q.num_computed, n) for q, n in zip(reqs, nsched)])
        samples = [q.num_computed + n >= q.prefill_len for q, n in zip(reqs, nsched)]
        return req_ids, reqs, ids, meta, samples

    def _forward(self, reqs: list[_Req], ids: list[int], meta: AttentionMetadata
                 ) -> list[torch.Tensor]:
        """The model, then each request's logits rows (its drafts' and its last token's)."""
        hidden = self.model(torch.tensor(ids, device=self.device), meta, self.kv_caches)
        ends = meta.query_start_loc.tolist()[1:]
        rows = [hidden[e - 1 - len(q.drafts):e] for e, q in zip(ends, reqs)]
        return [self.model.compute_logits(h) for h in rows]

    def _sample(self, reqs: list[_Req], logits: list[torch.Tensor], samples: list[bool]
                ) -> tuple[list[list[int]], list[list[TokenLogprobs] | None] | None]:
        """Sampled tokens per request, and their logprobs where requests asked."""
        params = BatchParams.from_params([q.params for q in reqs],
                                         [q.generator for q in reqs], samples, self.device,
                                         [(q.prompt_len, q.token_ids) for q in reqs],
                                         logits[0].shape[-1])
        if not any(q.drafts for q in reqs):
            toks = sample(torch.stack([lg[-1] for lg in logits]), params).tolist()
            sampled = [[t] if s else [] for t, s in zip(toks, samples)]
        else:
            sampled = [self._verify(lg, q, g) if s else []
                       for lg, q, g, s in zip(logits, reqs, params.generators, samples)]
        return sampled, self._logprobs(reqs, logits, params, sampled)

    def _logprobs(self, reqs: list[_Req], logits: list[torch.Tensor], params: BatchParams,
                  sampled: list[list[int]]) -> list[list[TokenLogprobs] | None] | None:
        """Per request, the logprobs of the tokens it sampled (its logits row j gave its
        token j); None for a request that asked for none, and None when none asked."""
        asked = [r for r, (q, toks) in enumerate(zip(reqs, sampled))
                 if q.params.logprobs is not None and toks]
        if not asked:
            return None
        t = lambda x: torch.tensor(x, dtype=torch.int64, device=self.device)  # noqa: E731
        rows = torch.cat([logits[r][:len(sampled[r])] for r in asked])
        host = compute(rows, t([x for r in asked for x in sampled[r]]),
                       max(reqs[r].params.logprobs for r in asked), self.cfg.logprobs_mode,
                       params, t([r for r in asked for _ in sampled[r]])).cpu().numpy()
        out: list[list[TokenLogprobs] | None] = [None] * len(reqs)
        at = 0
        for r in asked:
            n = len(sampled[r])
            out[r] = unpack(host[at:at + n], reqs[r].params.logprobs)
            at += n
        return out

    def _postprocess(self, reqs: list[_Req], sampled: list[list[int]]) -> list[list[int]]:
        for q, toks in zip(reqs, sampled):
            q.token_ids += toks
            q.drafts = []
        return self._propose(reqs, sampled)

    def _draft_dist(self, logits: torch.Tensor, q: _Req) -> torch.Tensor:
        t = torch.tensor([q.params.temperature], device=self.device)
        return target_probs(logits[None], t, t, t, False)[0]

    def _verify(self, logits: torch.Tensor, q: _Req, gen: torch.Generator | None) -> list[int]:
        """Plain speculative verification of one request's drafts."""
        drafts, d = q.drafts, len(q.drafts)
        out: list[int] = []
        if gen is None:                               # greedy: strict match
            for j in range(d + 1):
                t = int(logits[j].argmax())
                out.append(t)
                if j == d or t != drafts[j]:
                    return out
        sp = q.params
        t = lambda x, dt: torch.tensor([x], dtype=dt, device=self.device)  # noqa: E731
        p = target_probs(logits[None], t(sp.temperature, torch.float32), t(sp.top_k, torch.int64),
                         t(sp.top_p, torch.float32), sp.top_k > 0 or sp.top_p < 1)[0]
        u, e = row_noise([gen], [d], logits.shape[-1], self.device)
        qprobs = q.draft_probs
        for j, x in enumerate(drafts):
            qx = float(qprobs[j, x]) if qprobs is not None else 1.0
            if float(u[0, j]) * qx <= float(p[j, x]):
                out.append(x)
                continue
            qrow = qprobs[j] if qprobs is not None else torch.nn.functional.one_hot(
                torch.tensor(x, device=self.device), p.shape[-1]).to(p.dtype)
            resid = (p[j] - qrow).clamp(min=0)
            if float(resid.sum()) <= 0:
                resid = p[j]
            out.append(int((resid / e[0]).argmax()))
            return out
        out.append(int((p[d] / e[0]).argmax()))
        return out

    def _propose(self, reqs: list[_Req], sampled: list[list[int]]) -> list[list[int]]:
        if not self.k:
            return [[] for _ in reqs]
        live = [q for q, s in zip(reqs, sampled) if s]
        if self.cfg.speculative_method == "ngram":
            for q in live:
                q.drafts_next = ngram_propose(q.token_ids, self.k, self.cfg.ngram_min,
                                              self.cfg.ngram_max)
        elif live:
            self._propose_with_draft_model(live)
        return [q.drafts_next if s else [] for q, s in zip(reqs, sampled)]

    def _propose_with_draft_model(self, live: list[_Req]) -> None:
        """Catch the draft model up on every token it has not seen, then k greedy or
        sampled single-token steps."""
        model, kv = self.draft
        rows = [(q, q.draft_computed, len(q.token_ids) - q.draft_computed) for q in live]
        for q in live:
            q.drafts_next, q.draft_probs = [], None
        probs: list[list[torch.Tensor]] = [[] for _ in live]
        for j in range(self.k):
            ids, meta = self._meta(rows)
            hidden = model(torch.tensor(ids, device=self.device), meta, kv)
            ends = meta.query_start_loc.tolist()[1:]
            logits = model.compute_logits(hidden[[e - 1 for e in ends]])
            for r, q in enumerate(live):
                if q.params.greedy:
                    tok = int(logits[r].argmax())
                else:
                    dist = self._draft_dist(logits[r], q)
                    _, e = row_noise([q.generator], [0], dist.shape[-1], self.device)
                    tok = int((dist / e[0]).argmax())
                    probs[r].append(dist)
                q.drafts_next.append(tok)
            # next step: feed the draft just made (held in q.drafts for _meta)
            rows = []
            for q in live:
                q.drafts = q.drafts_next[:]
                rows.append((q, len(q.token_ids) + j, 1))
        for q, pr in zip(live, probs):
            q.drafts = []
            q.draft_computed = len(q.token_ids)
            q.draft_probs = torch.stack(pr) if pr else None
