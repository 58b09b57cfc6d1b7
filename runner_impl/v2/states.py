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


class RequestState:
    def __init__(self, max_num_reqs: int, max_model_len: int, k: int,
                 device: torch.device, faults: FaultSet) -> None:
        self.max_num_reqs = max_num_reqs
        self.max_model_len = max_model_len
        self.k = k
        self.device = device
        self.faults = faults
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

    @property
    def num_reqs(self) -> int:
        return len(self.req_id_to_index)

    def add_request(self, new: NewRequestData) -> int:
        slot = self.free_indices.pop()
        self.req_id_to_index[new.req_id] = slot
        self.index_to_req_id[slot] = new.req_id
        toks = new.all_token_ids
        n = len(toks)
        self.all_token_ids[slot, :n] = torch.tensor(toks, dtype=torch.int64).to(
            self.device, non_blocking=True)
        self.total_len[slot] = n
        self.num_computed_tokens[slot] = new.num_computed_tokens
        self.num_computed_tokens_np[slot] = new.num_computed_tokens
        self.prompt_len[slot] = len(new.prompt_token_ids)
        self.prefill_len[slot] = new.prefill_len
        self.prefill_len_gpu[slot] = new.prefill_len
        self.num_computed_prefill_tokens[slot] = min(new.num_computed_tokens, new.prefill_len)
        if not self.faults.active("stale-slot-state"):
            # vLLM PR 39833: a request that arrives already computed (PD decode side) goes
            # straight to a decode step, which reads last_sampled_tokens and draft_tokens.
            if 0 < new.num_computed_tokens <= new.prefill_len:
                self.last_sampled_tokens[slot] = toks[new.num_computed_tokens]
            self.draft_tokens[slot] = 0   # slice fill: no device-to-host sync
        return slot

    def remove_request(self, req_id: str) -> int | None:
        slot = self.req_id_to_index.pop(req_id, None)
        if slot is None:
            return None
        del self.index_to_req_id[slot]
        self.free_indices.append(slot)
        return slot

    def update_request(self, slot: int, num_computed_tokens: int) -> None:
        """Refresh the mirror from the scheduler (the fix of vLLM PR 42202)."""
        if not self.faults.active("mirror-increment"):
            self.num_computed_tokens_np[slot] = num_computed_tokens
        self.num_computed_prefill_tokens[slot] = min(
            self.num_computed_tokens_np[slot], self.prefill_len[slot])

    def advance_mirror_in_postprocess(self, idx: np.ndarray, num_scheduled: np.ndarray) -> None:
        """Pre-PR-42202 code path: the mirror grows by what was scheduled, so every
        rejected draft leaves it too high, forever."""
        if self.faults.active("mirror-increment"):
            self.num_computed_tokens_np[idx] += num_scheduled
