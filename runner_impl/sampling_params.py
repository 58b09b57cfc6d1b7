"""SamplingParams in vLLM's shape (the subset mrbench's workloads use), with vLLM's bounds."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .errors import RunnerError


@dataclass
class SamplingParams:
    temperature: float = 1.0          # 0 = greedy
    top_p: float = 1.0                # 1 = off
    top_k: int = 0                    # 0 (or -1, vLLM's other spelling) = off
    min_p: float = 0.0                # 0 = off; after temperature, before top-k / top-p
    # Penalties, on the raw logits (after the logit bias), as vLLM applies them:
    # repetition over prompt + output tokens, frequency and presence over output tokens.
    repetition_penalty: float = 1.0   # 1 = off
    frequency_penalty: float = 0.0    # 0 = off
    presence_penalty: float = 0.0     # 0 = off
    logit_bias: dict[int, float] | None = None   # token id -> added to its raw logit
    max_tokens: int = 16
    seed: int | None = None           # per-request seed; None = derived from the engine seed
    logprobs: int | None = None       # top-N logprobs per generated token; None = none
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
        if self.top_k < -1:
            raise RunnerError(f"SamplingParams.top_k must be 0 or -1 (off) or >= 1, "
                              f"got {self.top_k}")
        if self.top_k == -1:
            self.top_k = 0
        if not 0 <= self.min_p <= 1:
            raise RunnerError(f"SamplingParams.min_p must be in [0, 1], got {self.min_p}")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2 <= getattr(self, name) <= 2:
                raise RunnerError(f"SamplingParams.{name} must be in [-2, 2], "
                                  f"got {getattr(self, name)}")
        if not (math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0):
            raise RunnerError("SamplingParams.repetition_penalty must be a finite number > 0, "
                              f"got {self.repetition_penalty}")
        if self.logit_bias:
            bad = [t for t, b in self.logit_bias.items()
                   if not isinstance(t, int) or t < 0 or not math.isfinite(b)]
            if bad:
                raise RunnerError("SamplingParams.logit_bias needs token ids >= 0 and finite "
                                  f"biases, got {bad[0]!r}: {self.logit_bias[bad[0]]!r}")
        if self.logprobs is not None and self.logprobs < 0:
            raise RunnerError(f"SamplingParams.logprobs must be >= 0, got {self.logprobs}")
        if self.max_tokens < 1:
            raise RunnerError(f"SamplingParams.max_tokens must be >= 1, got {self.max_tokens}")
        if any(not s for s in self.stop):
            raise RunnerError("SamplingParams.stop must not contain empty strings")
        if self.greedy:               # vLLM: greedy ignores the filters, keeps bias/penalties
            self.top_p, self.top_k, self.min_p = 1.0, 0, 0.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def uses_penalties(self) -> bool:
        return (self.repetition_penalty != 1.0 or self.frequency_penalty != 0.0
                or self.presence_penalty != 0.0)

    @property
    def processes_raw_logits(self) -> bool:
        """A logit bias or a penalty: they change the raw logits, so even a greedy row's
        argmax (vLLM applies both before greedy sampling)."""
        return bool(self.logit_bias) or self.uses_penalties
