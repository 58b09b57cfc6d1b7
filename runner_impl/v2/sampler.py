"""Per-slot sampling state for the V2 runner: parameters live on the device per slot."""
from __future__ import annotations

import numpy as np
import torch

from ..engine.outputs import NewRequestData
from ..sampler import BatchParams, make_generator


class SamplingState:
    def __init__(self, max_num_reqs: int, device: torch.device) -> None:
        self.device = device
        # Device, truth: per-slot parameters, gathered by idx_mapping each step.
        self.temperature = torch.zeros(max_num_reqs, dtype=torch.float32, device=device)
        self.top_k = torch.zeros(max_num_reqs, dtype=torch.int64, device=device)
        self.top_p = torch.ones(max_num_reqs, dtype=torch.float32, device=device)
        # Host copies of the same facts, to decide which work a batch needs.
        self.is_random = np.zeros(max_num_reqs, dtype=bool)
        self.uses_top_k_top_p = np.zeros(max_num_reqs, dtype=bool)
        self.generators: list[torch.Generator | None] = [None] * max_num_reqs

    def add_request(self, slot: int, new: NewRequestData) -> None:
        sp = new.sampling_params
        self.temperature[slot] = sp.temperature
        self.top_k[slot] = sp.top_k
        self.top_p[slot] = sp.top_p
        self.is_random[slot] = not sp.greedy
        self.uses_top_k_top_p[slot] = sp.top_k > 0 or sp.top_p < 1
        self.generators[slot] = make_generator(new.seed, self.device)

    def batch_params(self, idx_np: np.ndarray, idx: torch.Tensor,
                     samples_token: np.ndarray) -> BatchParams:
        rand = self.is_random[idx_np]
        gens = [self.generators[s] if (r and keep) else None
                for s, r, keep in zip(idx_np, rand, samples_token)]
        return BatchParams(self.temperature[idx], self.top_k[idx], self.top_p[idx], gens,
                           bool(rand.any()), bool(self.uses_top_k_top_p[idx_np].any()))
