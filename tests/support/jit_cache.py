"""A target whose engines keep a kernel cache on disk the way Triton does, so that the CPU
tests can see what the harness does with an engine whose start compiled its kernels.

Registered as "jitcache" when imported (tests name it in MRBENCH_TARGET_MODULES so every
engine process imports it too). It is the bundled runner; its start "compiles" one kernel
per engine shape: it looks for the kernel's file under Triton's cache directory
(TRITON_CACHE_DIR) and writes it only when it is missing, as Triton's file cache does. It
also records, in its resolved info, whether this process compiled anything, so a test can
see which process was measured. With JITCACHE_NEVER_HITS set, every start writes its kernel
under a new name (a cache that does not keep).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from mrbench.harness.run.targets.base import register
from mrbench.harness.run.targets.bundled import BundledSession, BundledTarget

_COMPILED_HERE: list[str] = []          # kernels this process compiled (not loaded)


class _JitSession(BundledSession):
    def __init__(self, side, options) -> None:
        key = hashlib.sha256(repr((side.runner, options.max_num_seqs)).encode()).hexdigest()
        if os.environ.get("JITCACHE_NEVER_HITS"):
            key = hashlib.sha256(f"{key}-{os.getpid()}".encode()).hexdigest()
        kernel = Path(os.environ["TRITON_CACHE_DIR"]) / key[:16] / "kernel.bin"
        # JITCACHE_LAYERED: a cache that fills in layers, as vLLM 0.26's did on CUDA: the
        # start that compiles writes the kernel and its metadata, the start that loads it
        # builds a second kernel it had not stored, and only a third start loads everything
        loaded_path = kernel.parent / "loaded-path.bin"
        if kernel.is_file():
            kernel.read_bytes()                      # a cache hit: loaded
            if os.environ.get("JITCACHE_LAYERED") and not loaded_path.is_file():
                loaded_path.write_bytes(b"\0" * 64)
                _COMPILED_HERE.append(key[:16] + "-loaded-path")
        else:                                        # a miss: "compiled", then stored
            kernel.parent.mkdir(parents=True, exist_ok=True)
            kernel.write_bytes(b"\0" * 64)
            if os.environ.get("JITCACHE_LAYERED"):
                (kernel.parent / "kernel.json").write_text("{}")
            _COMPILED_HERE.append(key[:16])
        super().__init__(side, options)

    def resolved(self):
        return dict(super().resolved(), target="jitcache", pid=os.getpid(),
                    compiled_in_process=list(_COMPILED_HERE))


@register("jitcache")
class JitCacheTarget(BundledTarget):
    name = "jitcache"

    def open(self, side, options):
        return _JitSession(side, options)
