"""Draft proposers for the V2 runner; everything stays on the device.

Both write `RequestState.draft_tokens[slot, :k]` for every row; the scheduler only sees
-1 placeholders and decides how many drafts to verify.
- NgramProposer: prompt lookup. Find the latest earlier occurrence of the last n tokens
  (n from ngram_max down to ngram_min) that has k tokens after it; propose those k.
  No match: repeat the last token.
- DraftModelProposer: a smaller Llama standing in for MTP/EAGLE. Pass A runs it over the
  target's batch (same shape), which fills its KV for every accepted token; then k
  single-token steps from the last sampled token. Rows whose drafts were rejected leave
  junk KV past their length, overwritten before it can be read.
"""
from __future__ import annotations

import torch

from ..model.llama import AttentionMetadata, LlamaForCausalLM
from ..sampler import BatchParams, row_noise, target_probs
from .block_table import BlockTables
from .input_batch import InputBatch
from .states import RequestState


class NgramProposer:
    def __init__(self, k: int, ngram_min: int, ngram_max: int) -> None:
        self.k, self.nmin, self.nmax = k, ngram_min, ngram_max

    def propose(self, state: RequestState, batch: InputBatch, params: BatchParams) -> None:
        idx = batch.idx_mapping
        toks = state.all_token_ids[idx]               # [R, L]
        total = state.total_len[idx]                  # [R]
        R, L = toks.shape
        k = self.k
        rows = torch.arange(R, device=toks.device)
        last = toks[rows, (total - 1).clamp(min=0)]
        drafts = last[:, None].expand(R, k).clone()
        for n in range(self.nmin, self.nmax + 1):     # larger n overrides smaller
            if n + k > L:
                break
            tail_pos = (total[:, None] - n + torch.arange(n, device=toks.device)).clamp(min=0)
            tail = toks.gather(1, tail_pos)                       # [R, n]
            windows = toks.unfold(1, n, 1)                        # [R, L-n+1, n]
            start = torch.arange(windows.shape[1], device=toks.device)
            ok = (windows == tail[:, None, :]).all(-1)
            ok &= (start[None] + n + k <= total[:, None]) & (total[:, None] > n)
            best = torch.where(ok, start[None], -1).max(1).values   # latest match
            found = best >= 0
            cont = (best.clamp(min=0)[:, None] + n
                    + torch.arange(k, device=toks.device)).clamp(max=L - 1)
            drafts = torch.where(found[:, None], toks.gather(1, cont), drafts)
        state.draft_tokens[idx, :k] = drafts


class DraftModelProposer:
    def __init__(self, model: LlamaForCausalLM, kv_caches: list[torch.Tensor], k: int,
                 max_num_reqs: int, vocab_size: int, device: torch.device) -> None:
        self.model, self.kv_caches, self.k = model, kv_caches, k
        # Device, truth: q(x) of each slot's drafts, for probabilistic acceptance.
        self.draft_probs = torch.zeros(max_num_reqs, k, vocab_size, device=device)

    def propose(self, state: RequestState, batch: InputBatch, params: BatchParams,
                block_tables: BlockTables) -> None:
        idx = batch.idx_mapping
        R, k, dev = batch.num_reqs, self.k, state.device
        # Pass A: the target's tokens at the target's positions.
        self.model(batch.input_ids, batch.meta, self.kv_caches)
        # Autoregressive steps from the newest token, at positions computed on the device.
        pos = state.num_computed_tokens[idx].clone()      # post-update: position of last token
        tok = state.last_sampled_tokens[idx]
        # Host upper bound of this step's positions, from the (pre-step) mirror.
        ub = int((state.num_computed_tokens_np[batch.idx_mapping_np] + batch.num_scheduled).max())
        rows = torch.arange(R, device=dev)
        gens = params.generators                            # None for greedy/dropped rows
        drafts, probs = [], []
        for j in range(k):
            meta = AttentionMetadata(
                query_start_loc=torch.arange(R + 1, device=dev), seq_lens=pos + 1,
                block_table=batch.meta.block_table,
                slot_mapping=block_tables.slot_mapping(idx, rows, pos),
                token_row=rows, token_offset=torch.zeros_like(rows), positions=pos,
                max_query_len=1, max_seq_len=ub + j + 1, uniform_query_len=1)
            logits = self.model.compute_logits(self.model(tok, meta, self.kv_caches))
            greedy_tok = logits.argmax(-1)
            if params.any_random:
                q = target_probs(logits, params.temperature, params.top_k, params.top_p, False)
                _, e = row_noise(gens, [0] * R, logits.shape[-1], dev)
                tok = torch.where(params.temperature == 0, greedy_tok, (q / e).argmax(-1))
                probs.append(q)
            else:
                tok = greedy_tok
            drafts.append(tok)
            pos = pos + 1
        state.draft_tokens[idx, :k] = torch.stack(drafts, 1)
        if probs:
            self.draft_probs[idx] = torch.stack(probs, 1)
