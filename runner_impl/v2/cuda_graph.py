"""CUDA graphs for uniform-decode batches (vLLM MRv2's `CudaGraphManager`, reduced).

One graph per padded batch size, captured at warmup over persistent input buffers; a
uniform-decode step copies its inputs into those buffers, pads the batch up to the next
captured size and replays. Prefill and mixed batches run eagerly.

What makes the forward graph-safe: every shape is fixed per captured size, and nothing in
the forward reads the device on the host. In bf16/fp16 the Triton attention kernel bounds
each row's keys by `seq_lens`, read from the persistent device buffer at replay; in
float32/float64 the PyTorch attention gathers the whole block-table row
(max_blocks_per_req blocks) instead of the step's `max_seq_len` upper bound and masks
keys by those same `seq_lens`.

Padding rows must not touch real requests' KV: they write their K/V into one scratch
block the allocator never hands out (`pad_block`, the last block of the cache), attend
only to its first slot, and their outputs are dropped.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..model.llama import AttentionMetadata, LlamaForCausalLM

if TYPE_CHECKING:                 # types only: input_batch builds what run() replays
    from .input_batch import InputBatch


def capture_sizes(max_num_reqs: int) -> list[int]:
    """vLLM's default ladder: 1, 2, 4, then multiples of 8, up to max_num_reqs (included)."""
    sizes = [s for s in [1, 2, 4] + list(range(8, max_num_reqs + 1, 8)) if s <= max_num_reqs]
    if sizes[-1] != max_num_reqs:
        sizes.append(max_num_reqs)
    return sizes


class CudaGraphManager:
    def __init__(self, model: LlamaForCausalLM, kv_caches: list[torch.Tensor], max_num_reqs: int,
                 k: int, max_blocks_per_req: int, block_size: int, pad_block: int,
                 device: torch.device) -> None:
        self.model, self.kv_caches = model, kv_caches
        self.q = 1 + k                              # query tokens per row of a decode batch
        self.sizes = capture_sizes(max_num_reqs)
        self.max_blocks, self.block_size = max_blocks_per_req, block_size
        self.pad_block, self.pad_slot = pad_block, pad_block * block_size
        B, T = self.sizes[-1], self.sizes[-1] * self.q
        i64 = dict(dtype=torch.int64, device=device)
        # Persistent inputs: the graphs read these addresses at every replay.
        self.input_ids = torch.zeros(T, **i64)
        self.positions = torch.zeros(T, **i64)
        self.slot_mapping = torch.full((T,), self.pad_slot, **i64)
        self.seq_lens = torch.ones(B, **i64)
        self.block_table = torch.full((B, max_blocks_per_req), pad_block, **i64)
        # Fixed by the batch shape alone.
        self.query_start_loc = torch.arange(B + 1, **i64) * self.q
        self.token_row = torch.arange(B, **i64).repeat_interleave(self.q)
        self.token_offset = torch.arange(self.q, **i64).repeat(B)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.num_replays = 0

    def _meta(self, b: int) -> AttentionMetadata:
        t = b * self.q
        return AttentionMetadata(
            query_start_loc=self.query_start_loc[:b + 1], seq_lens=self.seq_lens[:b],
            block_table=self.block_table[:b], slot_mapping=self.slot_mapping[:t],
            token_row=self.token_row[:t], token_offset=self.token_offset[:t],
            positions=self.positions[:t], max_query_len=self.q,
            max_seq_len=self.max_blocks * self.block_size,    # the whole row, a fixed shape
            uniform_query_len=self.q)

    def _reset_padding(self, r: int, b: int) -> None:
        """Rows [r, b) become dummies: position 0, one key, the scratch block."""
        n, t = r * self.q, b * self.q
        self.input_ids[n:t].zero_()
        self.positions[n:t].zero_()
        self.slot_mapping[n:t].fill_(self.pad_slot)
        self.seq_lens[r:b].fill_(1)
        self.block_table[r:b].fill_(self.pad_block)

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture every size, largest first, into one memory pool (as vLLM does)."""
        self._reset_padding(0, self.sizes[-1])
        pool = None
        for b in reversed(self.sizes):
            ids, meta = self.input_ids[:b * self.q], self._meta(b)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):           # eager runs first: lazy init, kernel loads
                for _ in range(2):                  # (what the graph will hold, logits too)
                    out = self.model(ids, meta, self.kv_caches)
                    if self.q == 1:
                        self.model.compute_logits(out)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                out = self.model(ids, meta, self.kv_caches)
                # k = 0: one logit per row, so the graph computes them too (float32 [b, V]).
                logits = self.model.compute_logits(out) if self.q == 1 else None
            pool = graph.pool()
            self.graphs[b] = (graph, out, logits)
        torch.cuda.synchronize()

    def padded_size(self, num_reqs: int) -> int | None:
        for b in self.sizes:
            if b >= num_reqs:
                return b if b in self.graphs else None
        return None

    def fill_inputs(self, r: int, input_ids: torch.Tensor, positions: torch.Tensor,
                    slot_mapping: torch.Tensor, seq_lens: torch.Tensor,
                    block_table: torch.Tensor) -> None:
        """Copy a batch of r rows into the persistent input buffers."""
        n = r * self.q
        self.input_ids[:n].copy_(input_ids)
        self.positions[:n].copy_(positions)
        self.slot_mapping[:n].copy_(slot_mapping)
        self.seq_lens[:r].copy_(seq_lens)
        self.block_table[:r].copy_(block_table)

    def run(self, batch: InputBatch) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """(hidden states [R * q, hidden], logits [R, V] when k = 0 else None) from a
        graph replay, or None (no graph fits)."""
        r = batch.num_reqs
        b = self.padded_size(r)
        if b is None or batch.input_ids.shape[0] != r * self.q:
            return None
        n, meta = r * self.q, batch.meta
        if not batch.graphed:                 # StepGraphs' prepare has filled them already
            self.fill_inputs(r, batch.input_ids, meta.positions, meta.slot_mapping,
                             meta.seq_lens, meta.block_table)
        if b > r:
            self._reset_padding(r, b)
        graph, out, logits = self.graphs[b]
        graph.replay()
        self.num_replays += 1
        return out[:n], (logits[:r] if logits is not None else None)
