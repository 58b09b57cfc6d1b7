"""KV-cache block pool: reference-counted blocks, a free queue, and prefix caching as
vLLM's V1 does it (`vllm/v1/core/block_pool.py`, `kv_cache_utils.py`).

Without prefix caching a block has one owner and goes back to the free queue when that
request finishes or is preempted. With it, every *full* block of a request, once its KV is
computed, is registered under a hash of (parent block's hash, the block's tokens): a chain,
so one hash names a whole prefix. A later request whose first blocks hash alike reuses them
(each holder counts in the block's reference count) and computes only the rest. A freed
block keeps its hash while it waits in the free queue, least recently freed first: it can
still be hit until the allocator hands it out again (eviction).
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Sequence

import numpy as np

# The parent hash of a request's first block (vLLM seeds its own NONE_HASH per process; one
# constant here keeps two engines of one run, and two runs, hashing alike).
ROOT_HASH = b""


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def hash_block(parent: bytes, tokens: Sequence[int]) -> bytes:
    """The hash of one full block: sha256 of its parent's hash and its token ids (vLLM's
    default `prefix_caching_hash_algo`), so equal hashes mean equal prefixes up to here."""
    return hashlib.sha256(parent + np.asarray(tokens, dtype=np.int64).tobytes()).digest()


def extend_block_hashes(hashes: list[bytes], token_ids: Sequence[int], block_size: int
                        ) -> list[bytes]:
    """`hashes` (a request's chain so far) extended in place over every full block of
    `token_ids` not yet hashed; returned for convenience."""
    for i in range(len(hashes), len(token_ids) // block_size):
        parent = hashes[i - 1] if i else ROOT_HASH
        hashes.append(hash_block(parent, token_ids[i * block_size:(i + 1) * block_size]))
    return hashes


class BlockAllocator:
    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = False) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        # Free blocks, least recently freed first; with caching a free block may still hold
        # a cached prefix (evictable) until it is handed out again.
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        # Holders of each block: requests whose block table lists it (0: in `free`).
        self.ref_cnt = [0] * num_blocks
        # Caching: the hash each block is registered under (None: not cached), and the
        # cached block of each hash (one block per hash; a second block with the same
        # tokens stays unregistered).
        self.block_hash: list[bytes | None] = [None] * num_blocks
        self.cached: dict[bytes, int] = {}

    @property
    def num_free(self) -> int:
        return len(self.free)

    def blocks_needed(self, have: int, num_tokens: int) -> int:
        return max(0, cdiv(num_tokens, self.block_size) - have)

    def allocate(self, n: int) -> list[int] | None:
        """n blocks, or None (nothing taken) when fewer than n are free. A cached block
        handed out is evicted: its hash is forgotten."""
        if n > len(self.free):
            return None
        out = []
        for _ in range(n):
            b, _ = self.free.popitem(last=False)
            h = self.block_hash[b]
            if h is not None:
                del self.cached[h]
                self.block_hash[b] = None
            self.ref_cnt[b] = 1
            out.append(b)
        return out

    def release(self, block_ids: list[int]) -> None:
        """One holder lets go of each block; a block nobody holds goes back to the free
        queue. With caching, a request's tail blocks are queued first, so they are evicted
        before its head (the prefix other requests are likeliest to share), as vLLM does."""
        for b in (reversed(block_ids) if self.enable_caching else block_ids):
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self.free[b] = None

    # ---- prefix caching ----------------------------------------------------------------
    def longest_cache_hit(self, hashes: Sequence[bytes], max_blocks: int) -> list[int]:
        """The cached blocks of the longest prefix of `hashes` (at most `max_blocks`): the
        chain stops at the first block not cached."""
        hit: list[int] = []
        for h in hashes[:max_blocks]:
            b = self.cached.get(h)
            if b is None:
                break
            hit.append(b)
        return hit

    def num_evictable(self, block_ids: Sequence[int]) -> int:
        """How many of these blocks sit in the free queue (held by nobody): taking them as a
        cache hit leaves that many fewer blocks free."""
        return sum(self.ref_cnt[b] == 0 for b in block_ids)

    def touch(self, block_ids: Sequence[int]) -> None:
        """A request takes these cached blocks as its prefix: one more holder each; a block
        in the free queue leaves it (it can no longer be evicted)."""
        for b in block_ids:
            if self.ref_cnt[b] == 0:
                del self.free[b]
            self.ref_cnt[b] += 1

    def cache_block(self, block_id: int, block_hash: bytes) -> None:
        """Register a full block whose KV is computed under its hash, unless another block
        already holds that prefix (then this one stays a private copy)."""
        if self.block_hash[block_id] is None and block_hash not in self.cached:
            self.cached[block_hash] = block_id
            self.block_hash[block_id] = block_hash
