"""How much memory an engine may still take, asked before its KV cache is allocated.

Why ask: on CPU an allocation larger than what is free is not refused (Linux overcommits);
the zero-fill then touches every page and the OOM killer ends the engine, or another
process of the machine, a minute later, and the engine's own block tables for such a cache
(a Python entry per block) already take gigabytes before that. Asked up front, the engine
refuses in one line that says what was asked and what was free.
"""
from __future__ import annotations

from pathlib import Path

import torch

MEMINFO = Path("/proc/meminfo")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _meminfo_available() -> int | None:
    """MemAvailable of /proc/meminfo in bytes: what can be taken without swapping."""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_available() -> int | None:
    """What is left under this process's cgroup v2 memory limit (a container's, a CI job's),
    None where there is no limit or it cannot be read: MemAvailable does not see it."""
    try:
        line = next(ln for ln in Path("/proc/self/cgroup").read_text().splitlines()
                    if ln.startswith("0::"))
        group = CGROUP_ROOT / line[3:].lstrip("/")
        limit = (group / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int((group / "memory.current").read_text())
    except (OSError, ValueError, StopIteration):
        return None


def available_bytes(device: torch.device) -> int | None:
    """Bytes an allocation on `device` can take now: the GPU's free memory, or the host's
    available memory (the smaller of MemAvailable and what its cgroup leaves); None where
    this cannot be told."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    known = [b for b in (_meminfo_available(), _cgroup_available()) if b is not None]
    return min(known) if known else None


def size_text(n: int) -> str:
    """Bytes for people: GiB from 1 GiB up, else MiB."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"
