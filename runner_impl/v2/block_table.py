"""Per-slot block tables kept on the device, appended to as the scheduler grants blocks."""
from __future__ import annotations

import torch

from .staging import PinnedStaging


class BlockTables:
    def __init__(self, max_num_reqs: int, max_blocks_per_req: int, block_size: int,
                 device: torch.device, staging: PinnedStaging) -> None:
        self.block_size = block_size
        self.staging = staging
        self.max_blocks = max_blocks_per_req
        # Device, truth: KV block ids of each slot; num_blocks is the host count of each row.
        self.table = torch.zeros(max_num_reqs, max_blocks_per_req, dtype=torch.int64,
                                 device=device)
        self.num_blocks = [0] * max_num_reqs
        self._staged: list[tuple[int, int, int]] = []     # (slot, column, block id)

    def set_blocks(self, slot: int, block_ids: list[int]) -> None:
        """A slot's whole list (new request): overwrite, as vLLM's `overwrite=True`."""
        self.num_blocks[slot] = 0
        self.append(slot, block_ids)

    def append(self, slot: int, block_ids: list[int]) -> None:
        n0 = self.num_blocks[slot]
        self._staged += [(slot, n0 + i, b) for i, b in enumerate(block_ids)]
        self.num_blocks[slot] = n0 + len(block_ids)

    def apply_staged_writes(self) -> None:
        if self._staged:
            w = self.staging.upload(self._staged)
            self.table[w[:, 0], w[:, 1]] = w[:, 2]
            self._staged = []

    def slot_mapping(self, idx_mapping: torch.Tensor, token_row: torch.Tensor,
                     positions: torch.Tensor) -> torch.Tensor:
        """Flat KV slot of each token, computed on the device from its position."""
        block = self.table[idx_mapping[token_row], positions // self.block_size]
        return block * self.block_size + positions % self.block_size
