"""Engine configuration: every knob of LLM(...) in one validated place."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from .errors import RunnerError
from .faults import FaultSet
from .logprobs import LOGPROBS_MODES

RUNNERS = ("v2", "v1")
SPEC_METHODS = ("ngram", "draft")
DTYPES = {"float32": torch.float32, "float16": torch.float16,
          "bfloat16": torch.bfloat16, "float64": torch.float64}


@dataclass
class EngineConfig:
    model: str | None = None              # HF directory; None = the bundled default model
    runner: str = "v2"                    # "v2" (MRv2-style) or "v1" (reference)
    device: str = "cpu"
    dtype: str = "auto"                   # auto = float32 on CPU, bfloat16 on CUDA
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 512
    max_model_len: int | None = None      # None = the model's max_position_embeddings
    block_size: int = 16
    num_kv_blocks: int | None = None      # None = enough for max_num_seqs full-length requests
    enable_prefix_caching: bool = False   # vLLM's name: reuse cached full blocks of a prefix
    num_speculative_tokens: int = 0
    speculative_method: str = "ngram"
    draft_model: str | None = None        # HF directory of the draft model (method "draft")
    ngram_min: int = 1
    ngram_max: int = 3
    pd_disagg: bool = False
    faults: FaultSet = field(default_factory=FaultSet)
    seed: int = 0
    warmup: bool = True
    debug_poison_freed_slots: bool = False  # V2: freed slots get a poison token (state audit)
    enforce_eager: bool = False           # V2 on CUDA: no CUDA graphs (vLLM's enforce_eager)
    async_scheduling: bool = False        # V2: schedule step n+1 while step n runs (vLLM's
                                          # --async-scheduling); k = 0, colocated only
    logprobs_mode: str = "raw_logprobs"   # one of LOGPROBS_MODES (vLLM's engine option)

    def __post_init__(self) -> None:
        if not isinstance(self.faults, FaultSet):
            self.faults = FaultSet(self.faults)
        if self.runner not in RUNNERS:
            raise RunnerError(f"runner must be one of {RUNNERS}, got {self.runner!r}")
        if self.speculative_method not in SPEC_METHODS:
            raise RunnerError(
                f"speculative_method must be one of {SPEC_METHODS}, got {self.speculative_method!r}")
        if self.logprobs_mode not in LOGPROBS_MODES:
            raise RunnerError(f"logprobs_mode must be one of {LOGPROBS_MODES}, "
                              f"got {self.logprobs_mode!r}")
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
            if getattr(self, name) < 1:
                raise RunnerError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_speculative_tokens < 0:
            raise RunnerError(
                f"num_speculative_tokens must be >= 0, got {self.num_speculative_tokens}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise RunnerError(f"need 1 <= ngram_min <= ngram_max, got {self.ngram_min}, {self.ngram_max}")
        if self.dtype != "auto" and self.dtype not in DTYPES:
            raise RunnerError(f"dtype must be 'auto' or one of {sorted(DTYPES)}, got {self.dtype!r}")
        try:
            dev = torch.device(self.device)
        except (RuntimeError, TypeError):
            dev = None
        if dev is None or dev.type not in ("cpu", "cuda"):
            raise RunnerError(f"device must be 'cpu' or 'cuda', got {self.device!r}")
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise RunnerError("device 'cuda' requested but torch sees no CUDA device")
        if (self.num_speculative_tokens > 0 and self.speculative_method == "draft"
                and self.draft_model is None):
            raise RunnerError("speculative_method 'draft' needs draft_model=<HF directory>")
        if self.async_scheduling and (self.runner != "v2" or self.num_speculative_tokens
                                      or self.pd_disagg):
            raise RunnerError("async_scheduling needs runner 'v2', num_speculative_tokens=0 "
                              "and no pd_disagg")
        if self.async_scheduling and self.faults.slow_step_pct:
            # the ruler is a share of the step record, and under async scheduling a record
            # also spans the next step's queueing (and its busy work): it would compound
            raise RunnerError("slow-step:PCT runs without async_scheduling (it is sized by "
                              "the engine's step record, which async scheduling stretches "
                              "over the next step)")
        if self.model is not None and not Path(self.model).exists():
            raise RunnerError(f"model path does not exist: {self.model}")

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.device)

    @property
    def torch_dtype(self) -> torch.dtype:
        if self.dtype == "auto":
            return torch.bfloat16 if self.torch_device.type == "cuda" else torch.float32
        return DTYPES[self.dtype]

    @property
    def use_cuda_graphs(self) -> bool:
        """V2 on CUDA replays captured graphs for uniform-decode batches (captured at warmup)."""
        return self.runner == "v2" and self.torch_device.type == "cuda" and not self.enforce_eager

    @property
    def k(self) -> int:
        return self.num_speculative_tokens
