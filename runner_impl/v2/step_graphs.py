"""CUDA graphs of the step's glue, for single-token rows on CUDA: `device_inputs` (the
device half of prepare_inputs) and `post_update`.

Once the forward replays a graph, the host's cost per step is what remains: some sixty
small indexing kernels around it, each a Python call and a launch (docs/performance.md,
"Kernel tuning"). Both pieces are pure device work whose shapes depend only
on the number of rows R when every row has one query token and one logit (k = 0), so one
graph per R replays them: the host uploads its index arrays into the graph's input
buffer and launches one graph. The ops inside are exactly the eager ones (same code,
same order), so tokens and state are the same; a step that does not fit (prefill chunks
of several tokens, drafts, the seq-lens-sync fault's host read) runs them eagerly.

Every R from 1 to max_num_seqs is captured at warmup, not at first use: a capture waits
for the device, and a wait inside serving is the very bug class mrbench looks for.
Capture records kernels without running them, so warmup's dummy inputs change no state.
"""
from __future__ import annotations

from typing import Callable

import torch

from .block_table import BlockTables
from .cuda_graph import CudaGraphManager
from .input_batch import device_inputs
from .states import RequestState


class StepGraphs:
    def __init__(self, state: RequestState, block_tables: BlockTables, max_num_reqs: int,
                 post_update: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                        torch.Tensor], None],
                 forward_graphs: "CudaGraphManager | None" = None) -> None:
        self.state, self.block_tables = state, block_tables
        # The forward's graphs: prepare also fills their input buffers (rows [0, R)), so a
        # uniform-decode step copies nothing between the two replays.
        self.forward_graphs = forward_graphs
        self.max_num_reqs = max_num_reqs
        self.post_update = post_update       # (idx, nsched, ndrafts, sampled, num_sampled)
        # Per R: prepare (input buffer, graph, outputs), post (sampled buffer, graph, num_sampled).
        self._prepare: dict[int, tuple[torch.Tensor, torch.cuda.CUDAGraph, tuple]] = {}
        self._post: dict[int, tuple[torch.Tensor, torch.cuda.CUDAGraph, torch.Tensor,
                                    torch.Tensor]] = {}
        self.num_replays = 0

    def covers(self, R: int, T: int, W: int) -> bool:
        return T == R and W == 1 and R in self._prepare

    @staticmethod
    def host_len(R: int) -> int:
        """Length of prepare_inputs' host array when T = R and W = 1."""
        return 8 * R + 1

    @torch.inference_mode()
    def capture(self) -> None:
        device = self.state.num_computed_tokens.device
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        pool = None
        with torch.cuda.stream(side):
            for R in range(self.max_num_reqs, 0, -1):
                # Zeros: slot 0 for every row, in range for every gather; never executed.
                buf = torch.zeros(self.host_len(R), dtype=torch.int64, device=device)
                g = torch.cuda.CUDAGraph()
                g.capture_begin(pool=pool)
                outs = device_inputs(self.state, self.block_tables, buf, R, R, 1)
                if self.forward_graphs is not None:
                    self.forward_graphs.fill_inputs(R, outs[10], outs[8], outs[12], outs[9],
                                                    outs[11])
                g.capture_end()
                pool = g.pool()
                self._prepare[R] = (buf, g, outs)
                idx, _, _, _, nsched, ndrafts, samples = outs[:7]
                sampled = torch.zeros(R, 1, dtype=torch.int64, device=device)
                g2 = torch.cuda.CUDAGraph()
                g2.capture_begin(pool=pool)
                num_sampled = samples.long()
                self.post_update(idx, nsched, ndrafts, sampled, num_sampled)
                packed = torch.cat([num_sampled[:, None], sampled], 1)   # the output copy's
                g2.capture_end()
                self._post[R] = (sampled, g2, num_sampled, packed)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()

    def prepare(self, R: int, host) -> tuple[torch.Tensor, ...]:
        """device_inputs' outputs for this step: upload `host` into the graph's input
        buffer and replay. The outputs are the graph's own tensors, valid until its next
        replay (stream order keeps this step's readers ahead of it)."""
        buf, g, outs = self._prepare[R]
        self.state.staging.upload_into(host, buf)
        g.replay()
        self.num_replays += 1
        return outs

    def post(self, R: int, sampled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """post_update of a step whose inputs came from `prepare(R)`; returns num_sampled
        and [num_sampled | sampled], the rows the output copy sends to the host."""
        buf, g, num_sampled, packed = self._post[R]
        buf.copy_(sampled)
        g.replay()
        return num_sampled, packed
