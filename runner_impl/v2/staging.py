"""Host-to-device uploads through pinned memory, so they never block the CPU.

A non_blocking copy from pageable memory makes PyTorch synchronise the stream (the
pageable buffer could be freed mid-copy). Staging through pinned memory avoids that, as
vLLM's UvaBufferPool does. A bump allocator hands each upload its own region; regions are
recycled `depth` steps later. With synchronous steps (depth 1) that is the next step: the
previous step's output copy has been waited for, so every earlier upload has completed.
With async scheduling (depth 2) one step is still in flight when the next one stages its
uploads, so the two alternate between two sets of buffers; the step before the one in
flight has been waited for.
"""
from __future__ import annotations

import numpy as np
import torch


class PinnedStaging:
    def __init__(self, device: torch.device, capacity: int = 1 << 16, depth: int = 1) -> None:
        self.device = device
        self.pinned = device.type == "cuda"
        self.depth = depth
        self._sets = [{dt: self._alloc(capacity, dt) for dt in (torch.int64, torch.float32)}
                      for _ in range(depth)]
        self._retired: list[list[torch.Tensor]] = [[] for _ in range(depth)]  # outgrown, still read
        self._cur = 0
        self._bufs = self._sets[0]
        self._used = {dt: 0 for dt in self._bufs}

    def _alloc(self, n: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(n, dtype=dtype, pin_memory=self.pinned)

    def new_step(self) -> None:
        self._cur = (self._cur + 1) % self.depth
        self._bufs = self._sets[self._cur]
        self._used = {dt: 0 for dt in self._bufs}
        self._retired[self._cur].clear()

    def _stage(self, arr: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        """A pinned region of this step's set holding arr's values."""
        n, buf = arr.size, self._bufs[dtype]
        if self._used[dtype] + n > buf.numel():
            self._retired[self._cur].append(buf)
            buf = self._bufs[dtype] = self._alloc(max(2 * buf.numel(), n), dtype)
            self._used[dtype] = 0
        region = buf[self._used[dtype]:self._used[dtype] + n]
        self._used[dtype] += n
        region.numpy()[:] = arr.ravel()
        return region

    def upload(self, values, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        """Device tensor with these values (int64 or float32; async on CUDA)."""
        arr = np.asarray(values, dtype=np.int64 if dtype == torch.int64 else np.float32)
        if not self.pinned:
            return torch.from_numpy(arr.copy()).to(self.device)
        return self._stage(arr, dtype).view(arr.shape).to(self.device, non_blocking=True)

    def upload_into(self, values, dst: torch.Tensor) -> None:
        """Copy int64 values into an existing CUDA tensor (a graph's input buffer)."""
        arr = np.asarray(values, dtype=np.int64)
        dst.view(-1).copy_(self._stage(arr, torch.int64), non_blocking=True)
