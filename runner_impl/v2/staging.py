"""Host-to-device uploads through pinned memory, so they never block the CPU.

A non_blocking copy from pageable memory makes PyTorch synchronise the stream (the
pageable buffer could be freed mid-copy). Staging through pinned memory avoids that, as
vLLM's UvaBufferPool does. A bump allocator hands each upload its own region; regions are
recycled at the start of the next step, by which time the previous step's output copy
has been waited for, so every earlier upload has completed.
"""
from __future__ import annotations

import numpy as np
import torch


class PinnedStaging:
    def __init__(self, device: torch.device, capacity: int = 1 << 16) -> None:
        self.device = device
        self.pinned = device.type == "cuda"
        self._bufs = {dt: self._alloc(capacity, dt) for dt in (torch.int64, torch.float32)}
        self._used = {dt: 0 for dt in self._bufs}
        self._retired: list[torch.Tensor] = []     # outgrown buffers still being read

    def _alloc(self, n: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(n, dtype=dtype, pin_memory=self.pinned)

    def new_step(self) -> None:
        self._used = {dt: 0 for dt in self._bufs}
        self._retired.clear()

    def upload(self, values, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        """Device tensor with these values (int64 or float32; async on CUDA)."""
        arr = np.asarray(values, dtype=np.int64 if dtype == torch.int64 else np.float32)
        if not self.pinned:
            return torch.from_numpy(arr.copy()).to(self.device)
        n, buf = arr.size, self._bufs[dtype]
        if self._used[dtype] + n > buf.numel():
            self._retired.append(buf)
            buf = self._bufs[dtype] = self._alloc(max(2 * buf.numel(), n), dtype)
            self._used[dtype] = 0
        region = buf[self._used[dtype]:self._used[dtype] + n]
        self._used[dtype] += n
        region.numpy()[:] = arr.ravel()
        return region.view(arr.shape).to(self.device, non_blocking=True)
