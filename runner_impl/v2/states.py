"""Persistent per-slot request state, the MRv2 way (vLLM `worker/gpu/states.py`).

A request occupies one *slot* (row) from admission to finish. Slots come from a LIFO
free list, so a freed slot goes to the very next request: state a new occupant does not
initialise is read from the previous one. Each array says which copy is the truth.
"""
from __future__ import annotations

import numpy as np
import torch

from ..engine.outputs import NewRequestData
from ..faults import FaultSet
from .staging import PinnedStaging


class RequestState:
    def __init__(self, max_num_reqs: int, max_model_len: int, k: int,
                 device: torch.device, faults: FaultSet, staging: PinnedStaging,
                 poison_token: int | None = None) -> None:
        self.max_num_reqs = max_num_reqs
        # Debug (mrbench's state audit): a freed slot's per-slot token state is overwritten
        # with this id, so a new occupant that reads it before initialising it decodes garbage
        # instead of, by luck, its predecessor's plausible token.
        self.poison_token = poison_token
        self._staged_poison: list[int] = []
        self.max_model_len = max_model_len
        self.k = k
        self.device = device
        self.faults = faults
        self.staging = staging
        self.free_indices: list[int] = list(range(max_num_reqs))   # LIFO: pop()/append()
        self.req_id_to_index: dict[str, int] = {}
        self.index_to_req_id: dict[int, str] = {}

        i64 = dict(dtype=torch.int64, device=device)
        # Device, truth: token ids of each slot (prompt + outputs). One spare column takes
        # writes of rejected positions, so post_update needs no data-dependent shapes.
        self.all_token_ids = torch.zeros(max_num_reqs, max_model_len + k + 2, **i64)
        # Device, truth: number of valid entries of all_token_ids.
        self.total_len = torch.zeros(max_num_reqs, **i64)
        # Device, truth: tokens whose KV is in the cache. Advanced on the device in
        # post_update by what the sampler really accepted.
        self.num_computed_tokens = torch.zeros(max_num_reqs, **i64)
        # Host, optimistic mirror of num_computed_tokens: an UPPER BOUND of the device
        # value, refreshed from the scheduler every step (vLLM PR 42202). Sizes attention
        # work (max_seq_len) without reading the device.
        self.num_computed_tokens_np = np.zeros(max_num_reqs, dtype=np.int64)
        # Host, truth: prefill progress = min(mirror, prefill_len).
        self.num_computed_prefill_tokens = np.zeros(max_num_reqs, dtype=np.int64)
        # Host, truth (set at admission): prompt length and tokens handed over as prefill.
        self.prompt_len = np.zeros(max_num_reqs, dtype=np.int64)
        self.prefill_len = np.zeros(max_num_reqs, dtype=np.int64)
        # Device copy of prefill_len (read by prepare_inputs on the device).
        self.prefill_len_gpu = torch.zeros(max_num_reqs, **i64)
        # Device, truth: the newest token of each slot (no KV yet); input of a decode row.
        self.last_sampled_tokens = torch.zeros(max_num_reqs, **i64)
        # Device, truth: drafts proposed for each slot; the scheduler sees -1 placeholders.
        self.draft_tokens = torch.zeros(max_num_reqs, max(k, 1), **i64)
        # Host-side writes of requests added this step, landed by apply_staged_writes().
        self._staged_tokens: list[tuple[int, list[int]]] = []
        self._staged_scalars: list[tuple[int, int, int, int]] = []
        self._staged_last_sampled: list[tuple[int, int]] = []
        self._staged_draft_reset: list[int] = []

    @property
    def num_reqs(self) -> int:
        return len(self.req_id_to_index)

    def add_request(self, new: NewRequestData) -> int:
        """Take a slot and stage the request's writes; apply_staged_writes() lands them."""
        slot = self.free_indices.pop()
        self.req_id_to_index[new.req_id] = slot
        self.index_to_req_id[slot] = new.req_id
        toks, nc = new.all_token_ids, new.num_computed_tokens
        prefill_len = self._prefill_len(new)
        self.num_computed_tokens_np[slot] = nc
        self.prompt_len[slot] = len(new.prompt_token_ids)
        self.prefill_len[slot] = prefill_len
        self.num_computed_prefill_tokens[slot] = min(nc, prefill_len)
        self._staged_tokens.append((slot, toks))
        self._staged_scalars.append((slot, len(toks), nc, prefill_len))
        if not self.faults.active("stale-slot-state"):
            # vLLM PR 39833: a request that arrives already computed (PD decode side) goes
            # straight to a decode step, which reads last_sampled_tokens and draft_tokens.
            if 0 < nc <= prefill_len:
                self._staged_last_sampled.append((slot, toks[nc]))
            self._staged_draft_reset.append(slot)
        return slot

    def _prefill_len(self, new: NewRequestData) -> int:
        """Tokens the runner takes as the request's prefill: its prompt, or (resumed after
        preemption) its prompt and the outputs it recomputes. Rows past it are decode rows,
        fed from last_sampled_tokens and draft_tokens."""
        if self.faults.active("resumed-prefill-len"):
            # The fault's pre-fix path: a resumed request's prefill taken for a fresh
            # prompt's, so recomputing its outputs reads slot state it never set.
            return len(new.prompt_token_ids)
        return new.prefill_len

    def apply_staged_writes(self) -> None:
        """One upload and a few scatters for every request added this step."""
        up = self.staging.upload
        if self._staged_poison:           # before this step's admissions, which may reuse them
            slots = up(self._staged_poison)
            self.last_sampled_tokens.index_fill_(0, slots, self.poison_token)
            self.draft_tokens.index_fill_(0, slots, self.poison_token)
            self._staged_poison = []
        if not self._staged_scalars:
            return
        sc = up(self._staged_scalars)                       # [m, 4]: slot, total, nc, prefill
        slots = sc[:, 0]
        self.total_len[slots] = sc[:, 1]
        self.num_computed_tokens[slots] = sc[:, 2]
        self.prefill_len_gpu[slots] = sc[:, 3]
        rows = [s for s, t in self._staged_tokens for _ in t]
        cols = [i for _, t in self._staged_tokens for i in range(len(t))]
        flat = [x for _, t in self._staged_tokens for x in t]
        tok = up([rows, cols, flat])
        self.all_token_ids[tok[0], tok[1]] = tok[2]
        if self._staged_last_sampled:
            ls = up(self._staged_last_sampled)
            self.last_sampled_tokens[ls[:, 0]] = ls[:, 1]
        if self._staged_draft_reset:
            self.draft_tokens.index_fill_(0, up(self._staged_draft_reset), 0)
        self._staged_tokens, self._staged_scalars = [], []
        self._staged_last_sampled, self._staged_draft_reset = [], []

    def is_prefilling(self, idx: np.ndarray, num_scheduled: np.ndarray) -> np.ndarray:
        """Per request, after this step's tokens: still short of prefill_len? (vLLM PR 42202
        replaced a batch-wide `any_prefills` with a per-request array.)"""
        return self.num_computed_prefill_tokens[idx] + num_scheduled < self.prefill_len[idx]

    def remove_request(self, req_id: str) -> int | None:
        slot = self.req_id_to_index.pop(req_id, None)
        if slot is None:
            return None
        del self.index_to_req_id[slot]
        self.free_indices.append(slot)
        if self.poison_token is not None:
            self._staged_poison.append(slot)
        return slot

    def update_requests(self, slots: np.ndarray, num_computed_tokens: np.ndarray) -> None:
        """Refresh the mirror of these (distinct) slots from the scheduler (the fix of vLLM
        PR 42202)."""
        if not self.faults.active("mirror-increment"):
            self.num_computed_tokens_np[slots] = num_computed_tokens
        self.num_computed_prefill_tokens[slots] = np.minimum(
            self.num_computed_tokens_np[slots], self.prefill_len[slots])

    def advance_mirror_in_postprocess(self, idx: np.ndarray, num_scheduled: np.ndarray) -> None:
        """Pre-PR-42202 code path: the mirror grows by what was scheduled, so every
        rejected draft leaves it too high, forever."""
        if self.faults.active("mirror-increment"):
            self.num_computed_tokens_np[idx] += num_scheduled
