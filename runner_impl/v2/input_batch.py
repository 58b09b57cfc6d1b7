"""prepare_inputs: turn a scheduler output into model inputs without reading the device.

The host knows the batch *shape* (rows, query lengths, drafts per row); everything that
depends on device state (positions, seq_lens, input ids, slot mapping) is computed on the
device. Attention work is sized by a host UPPER BOUND of seq_lens built from the CPU
mirror, so no device-to-host copy is needed (vLLM PR 40654).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..engine.outputs import SchedulerOutput
from ..faults import FaultSet
from ..model.llama import AttentionMetadata
from .block_table import BlockTables
from .dispatch import dispatch_key
from .states import RequestState

if TYPE_CHECKING:
    from .step_graphs import StepGraphs


@dataclass
class InputBatch:
    req_ids: list[str]
    idx_mapping_np: np.ndarray        # batch row -> slot (host)
    idx_mapping: torch.Tensor         # same, device
    num_scheduled: np.ndarray         # query tokens per row (host)
    num_scheduled_gpu: torch.Tensor
    num_drafts: np.ndarray            # drafts scheduled per row (host)
    num_drafts_gpu: torch.Tensor
    samples_token: np.ndarray         # False: a partial prefill chunk, its sample is dropped
    samples_token_gpu: torch.Tensor
    input_ids: torch.Tensor
    meta: AttentionMetadata
    logits_indices: torch.Tensor      # [R, 1 + max_drafts] flat token index of each logit
    dispatch_key: tuple
    graphed: bool = False             # device inputs came from a StepGraphs replay

    @property
    def num_reqs(self) -> int:
        return len(self.req_ids)


def prepare_inputs(state: RequestState, block_tables: BlockTables, sched: SchedulerOutput,
                   k: int, faults: FaultSet, graphs: "StepGraphs | None" = None) -> InputBatch:
    req_ids = sched.req_ids
    R = len(req_ids)
    idx_np = np.array([state.req_id_to_index[r] for r in req_ids], dtype=np.int64)
    num_sched = np.array([sched.num_scheduled_tokens[r] for r in req_ids], dtype=np.int64)
    spec = sched.scheduled_spec_decode_tokens
    num_drafts = np.array([len(spec.get(r, ())) for r in req_ids], dtype=np.int64)
    T = int(num_sched.sum())
    qsl = np.zeros(R + 1, dtype=np.int64)
    np.cumsum(num_sched, out=qsl[1:])
    token_row = np.repeat(np.arange(R, dtype=np.int64), num_sched)
    token_offset = np.arange(T, dtype=np.int64) - qsl[token_row]
    # A row samples a token unless it is a prefill chunk that stops short of prefill_len.
    samples_token = ~state.is_prefilling(idx_np, num_sched)
    # Logit positions: the last 1 + drafts tokens of each row, padded by repeating.
    W = 1 + int(num_drafts.max(initial=0))
    j = np.minimum(np.arange(W)[None, :], num_drafts[:, None])
    logits_idx = qsl[1:, None] - 1 - num_drafts[:, None] + j

    # One host-to-device copy for every host-known index array.
    host = np.concatenate([idx_np, qsl, token_row, token_offset, num_sched, num_drafts,
                           samples_token.astype(np.int64), logits_idx.ravel()])
    # The seq-lens-sync fault reads the device on the host: never inside a graph.
    graphed = (graphs is not None and graphs.covers(R, T, W)
               and not faults.active("seq-lens-sync"))
    if graphed:
        dev = graphs.prepare(R, host)
    else:
        dev = device_inputs(state, block_tables, state.staging.upload(host), R, T, W)
    idx, qsl_d, row_d, off_d, nsched_d, ndraft_d, samples_d, logits_d, \
        positions, seq_lens, input_ids, block_table, slot_mapping = dev
    if faults.active("chunk-slot-mapping"):
        slot_mapping = _pre_36580_slot_mapping(state, block_tables, idx_np, samples_token,
                                               dev, slot_mapping)
    if faults.active("prefix-hit-slot-mapping"):
        slot_mapping = _admitted_from_zero_slot_mapping(
            state, block_tables, idx_np, len(sched.scheduled_new_reqs), dev, slot_mapping)

    # Host upper bound of seq_lens: mirror + scheduled tokens.
    seq_lens_ub = state.num_computed_tokens_np[idx_np] + num_sched
    if faults.active("seq-lens-sync"):
        # Pre-PR-40654 path: attention metadata reads the device seq_lens on the host.
        seq_lens_cpu = seq_lens.cpu()
        max_seq_len = int(seq_lens_cpu.max().item())
    else:
        max_seq_len = int(seq_lens_ub.max(initial=1))

    key = dispatch_key(num_sched, k)
    meta = AttentionMetadata(
        query_start_loc=qsl_d, seq_lens=seq_lens, block_table=block_table,
        slot_mapping=slot_mapping, token_row=row_d, token_offset=off_d, positions=positions,
        max_query_len=int(num_sched.max(initial=1)), max_seq_len=max_seq_len,
        uniform_query_len=(1 + k) if key[0] == "uniform_decode" else None,
        query_lens_cpu=num_sched)
    return InputBatch(
        req_ids=req_ids, idx_mapping_np=idx_np, idx_mapping=idx, num_scheduled=num_sched,
        num_scheduled_gpu=nsched_d, num_drafts=num_drafts, num_drafts_gpu=ndraft_d,
        samples_token=samples_token, samples_token_gpu=samples_d,
        input_ids=input_ids, meta=meta, logits_indices=logits_d,
        dispatch_key=key, graphed=graphed)


def _pre_36580_slot_mapping(state: RequestState, block_tables: BlockTables,
                            idx_np: np.ndarray, samples_token: np.ndarray,
                            dev: tuple[torch.Tensor, ...], clean: torch.Tensor) -> torch.Tensor:
    """The `chunk-slot-mapping` fault (the class of the bug vLLM PR 36580 fixed in MRv2's
    `_compute_slot_mappings_kernel`): a prefill chunk that samples nothing is mapped as if
    it began its prompt, each token at its offset in the chunk. That is exact for a first
    chunk, so only a middle chunk (it starts mid-prompt and does not finish it) gets wrong
    slots: its KV overwrites the first chunk's and its own positions stay empty. Steps
    without a middle chunk keep the clean mapping (and the clean op count)."""
    middle = ~samples_token & (state.num_computed_prefill_tokens[idx_np] > 0)
    if not middle.any():
        return clean
    idx, row_d, off_d, samples_d, positions = dev[0], dev[2], dev[3], dev[6], dev[8]
    return block_tables.slot_mapping(idx, row_d, torch.where(samples_d[row_d], positions, off_d))


def _admitted_from_zero_slot_mapping(state: RequestState, block_tables: BlockTables,
                                     idx_np: np.ndarray, num_new: int,
                                     dev: tuple[torch.Tensor, ...],
                                     clean: torch.Tensor) -> torch.Tensor:
    """The `prefix-hit-slot-mapping` fault: the prefill rows of requests admitted this
    step (the batch's first `num_new` rows) are mapped as if each began its prompt at 0,
    each token at its offset in the query. A fresh or resumed request's first chunk does
    begin at 0 and a PD import's row is a decode row, so only a request admitted with a
    cached prefix (0 < computed < prefill_len) gets wrong slots: the cached blocks'.
    Steps without one keep the clean mapping (and the clean op count)."""
    computed = state.num_computed_prefill_tokens[idx_np]
    hit = ((np.arange(len(idx_np)) < num_new) & (computed > 0)
           & (computed < state.prefill_len[idx_np]))
    if not hit.any():
        return clean
    idx, row_d, off_d, positions = dev[0], dev[2], dev[3], dev[8]
    hit_d = state.staging.upload(hit.astype(np.int64)).bool()
    return block_tables.slot_mapping(idx, row_d, torch.where(hit_d[row_d], off_d, positions))


def device_inputs(state: RequestState, block_tables: BlockTables, dev: torch.Tensor,
                  R: int, T: int, W: int) -> tuple[torch.Tensor, ...]:
    """Everything prepare_inputs computes on the device, from the uploaded host arrays
    `dev` and the device truth. Device work only (no host reads), so `StepGraphs` can
    capture it; shapes depend on (R, T, W) alone."""
    parts = torch.split(dev, [R, R + 1, T, T, R, R, R, R * W])
    idx, qsl_d, row_d, off_d, nsched_d, ndraft_d, samples_d, logits_d = parts

    # Device truth -> positions, seq_lens.
    num_computed = state.num_computed_tokens[idx]
    positions = num_computed[row_d] + off_d
    seq_lens = num_computed + nsched_d

    # Input ids: prefill rows read their tokens; decode rows (seq_len > prefill_len) take
    # the slot's last sampled token followed by its drafts.
    slot_t = idx[row_d]
    from_tokens = state.all_token_ids[slot_t, positions]
    draft_col = (off_d - 1).clamp(min=0, max=state.draft_tokens.shape[1] - 1)
    decode_tok = torch.where(off_d == 0, state.last_sampled_tokens[slot_t],
                             state.draft_tokens[slot_t, draft_col])
    is_decode_row = seq_lens > state.prefill_len_gpu[idx]
    input_ids = torch.where(is_decode_row[row_d], decode_tok, from_tokens)
    return (idx, qsl_d, row_d, off_d, nsched_d, ndraft_d, samples_d.bool(), logits_d.view(R, W),
            positions, seq_lens, input_ids, block_tables.table[idx],
            block_tables.slot_mapping(idx, row_d, positions))
