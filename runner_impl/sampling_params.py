"""SamplingParams in vLLM's shape (the subset mrbench's workloads use)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import RunnerError


@dataclass
class SamplingParams:
    temperature: float = 1.0          # 0 = greedy
    top_p: float = 1.0                # 1 = off
    top_k: int = 0                    # 0 = off
    max_tokens: int = 16
    seed: int | None = None           # per-request seed; None = derived from the engine seed
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if not self.temperature >= 0:
            raise RunnerError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise RunnerError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise RunnerError(f"SamplingParams.top_k must be >= 0 (0 = off), got {self.top_k}")
        if self.max_tokens < 1:
            raise RunnerError(f"SamplingParams.max_tokens must be >= 1, got {self.max_tokens}")
        if any(not s for s in self.stop):
            raise RunnerError("SamplingParams.stop must not contain empty strings")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0
