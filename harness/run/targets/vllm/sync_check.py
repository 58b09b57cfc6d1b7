"""vLLM's own sync check on one side (`--vllm-sync-check warn|error`, vLLM's
VLLM_GPU_SYNC_CHECK): vLLM turns torch's sync debug mode on around execute_model and
sample_tokens once warmup is done, and each synchronizing CUDA operation there warns. Every
warning is counted, per call site, over the steps the session ran; the gate judges the
candidate's count (checks/counts.py, `sync_check_warnings`)."""
from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

_TORCH_SYNC_WARNING = "called a synchronizing CUDA operation"


class SyncWarnings:
    """The warnings of vLLM's sync check in this process, from when it is made; nothing is
    counted when `mode` is None (the check is off)."""

    def __init__(self, mode: str | None) -> None:
        self.mode = mode
        self.warnings = 0
        self.sites: Counter[str] = Counter()
        self.steps = 0
        if mode:
            self._count()

    @staticmethod
    def armed() -> bool:
        """Whether vLLM armed its check (it does after warmup, where the release has it)."""
        try:
            from vllm.utils import gpu_sync_debug  # lazy: vLLM is optional (the vllm target only)
        except ImportError:
            return False
        return bool(getattr(gpu_sync_debug, "_sync_check_enabled", False))

    def _count(self) -> None:
        """Count every sync-check warning: Python shows a warning once per site by default,
        so the filter says "always", and only a site's first one reaches the log."""
        warnings.filterwarnings("always", message=f".*{_TORCH_SYNC_WARNING}")
        prev = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if _TORCH_SYNC_WARNING not in str(message):
                return prev(message, category, filename, lineno, file, line)
            self.warnings += 1
            site = f"{filename}:{lineno}"
            self.sites[site] += 1
            if self.sites[site] == 1:
                return prev(message, category, filename, lineno, file, line)
            return None
        warnings.showwarning = show

    def counters(self) -> dict[str, float]:
        """The session's counters of the check (none when it is off)."""
        if not self.mode:
            return {}
        return dict(sync_check_warnings=float(self.warnings),
                    sync_check_steps=float(self.steps), sync_check_armed=float(self.armed()))

    def resolved(self) -> dict[str, Any]:
        """What the run's manifest records of the check."""
        top = dict(self.sites.most_common(8))
        return dict(sync_check=dict(mode=self.mode, armed=self.armed(), sites=top)
                    if self.mode else None, sync_check_sites=top)

    def reset(self) -> None:
        self.warnings = self.steps = 0
