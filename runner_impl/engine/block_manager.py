"""KV-cache block allocator: a free list of fixed-size blocks (no prefix caching yet)."""
from __future__ import annotations

from collections import deque


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class BlockAllocator:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.free = deque(range(num_blocks))

    def blocks_needed(self, have: int, num_tokens: int) -> int:
        return max(0, cdiv(num_tokens, self.block_size) - have)

    def allocate(self, n: int) -> list[int] | None:
        """n blocks, or None (nothing taken) when fewer than n are free."""
        if n > len(self.free):
            return None
        return [self.free.popleft() for _ in range(n)]

    def release(self, block_ids: list[int]) -> None:
        self.free.extend(block_ids)
