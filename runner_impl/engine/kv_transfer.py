"""KV hand-off between a prefill instance and a decode instance (PD disaggregation).

A small transport interface, so a real transport (NIXL, shared memory, sockets) can
replace the in-process tensor copy without touching the engine.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass
class KVPayload:
    req_id: str
    num_tokens: int                 # positions [0, num_tokens) are carried
    blocks: list[torch.Tensor]      # per cache tensor: [2, n_blocks, block_size, kvh, D]


class KVTransport(Protocol):
    def send(self, req_id: str, kv_caches: list[torch.Tensor], block_ids: list[int],
             num_tokens: int) -> KVPayload: ...

    def recv(self, payload: KVPayload, kv_caches: list[torch.Tensor],
             block_ids: list[int]) -> None: ...


class TensorCopyTransport:
    """Copies the blocks out of the sender's cache and into the receiver's."""

    def send(self, req_id: str, kv_caches: list[torch.Tensor], block_ids: list[int],
             num_tokens: int) -> KVPayload:
        bs = kv_caches[0].shape[2]
        ids = torch.tensor(block_ids[:-(-num_tokens // bs)], device=kv_caches[0].device)
        return KVPayload(req_id, num_tokens, [c[:, ids].clone() for c in kv_caches])

    def recv(self, payload: KVPayload, kv_caches: list[torch.Tensor],
             block_ids: list[int]) -> None:
        n = payload.blocks[0].shape[1]
        ids = torch.tensor(block_ids[:n], device=kv_caches[0].device)
        for cache, blocks in zip(kv_caches, payload.blocks):
            cache[:, ids] = blocks.to(cache.device)
