"""runner_impl: an MRv2-style model runner in plain PyTorch, a V1 reference path, and one
fault switch per historic MRv2 regression (see faults.py)."""
from .errors import ModelLoadError, RunnerError
from .faults import COVERAGE_FAULTS, FAULTS, KNOWN_FAULTS, FaultSet
from .llm import LLM, CompletionOutput, RequestOutput
from .sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "FAULTS",
           "COVERAGE_FAULTS", "KNOWN_FAULTS", "FaultSet", "RunnerError", "ModelLoadError"]
