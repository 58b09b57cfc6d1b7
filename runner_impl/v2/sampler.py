"""Per-slot sampling state for the V2 runner: parameters live on the device per slot."""
from __future__ import annotations

import numpy as np
import torch

from ..engine.outputs import NewRequestData
from ..faults import FaultSet
from ..sampler import BatchParams, make_generator
from .staging import PinnedStaging


class SamplingState:
    def __init__(self, max_num_reqs: int, device: torch.device, staging: PinnedStaging,
                 faults: FaultSet | None = None) -> None:
        self.device = device
        self.faults = faults or FaultSet()
        self.staging = staging
        self._staged: list[tuple[int, float, int, float]] = []
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
        self.is_random[slot] = not sp.greedy
        self.uses_top_k_top_p[slot] = sp.top_k > 0 or sp.top_p < 1
        self.generators[slot] = make_generator(new.seed, self.device)
        self._staged.append((slot, sp.temperature, sp.top_k, sp.top_p))

    def apply_staged_writes(self) -> None:
        if not self._staged:
            return
        vals = self.staging.upload(self._staged, torch.float32)     # [m, 4]
        slots = vals[:, 0].long()
        self.temperature[slots] = vals[:, 1]
        self.top_k[slots] = vals[:, 2].long()
        self.top_p[slots] = vals[:, 3]
        self._staged = []

    def batch_params(self, idx_np: np.ndarray, idx: torch.Tensor,
                     samples_token: np.ndarray, lazy: bool = False) -> BatchParams:
        """lazy: a one-logit batch whose greedy rows never read the per-row tensors
        (`sample` returns the argmax), so an all-greedy batch skips gathering them."""
        rand = self.is_random[idx_np]
        any_random = bool(rand.any())
        if lazy and not any_random:
            return BatchParams(None, None, None, [None] * len(idx_np), False, False)
        gens = [self.generators[s] if (r and keep) else None
                for s, r, keep in zip(idx_np, rand, samples_token)]
        if self.faults.active("shared-sampling-noise") and any(g is not None for g in gens):
            gens = self._shared_noise(gens)
        return BatchParams(self.temperature[idx], self.top_k[idx], self.top_p[idx], gens,
                           any_random, bool(self.uses_top_k_top_p[idx_np].any()))

    def _shared_noise(self, gens: list[torch.Generator | None]) -> list[torch.Generator | None]:
        """The fault's pre-fix path: every sampling row of the step draws from one random
        state (the first row's), so rows get the same noise where it must be independent."""
        first = next(g for g in gens if g is not None)
        state = first.get_state()
        out: list[torch.Generator | None] = []
        for g in gens:
            if g is None or g is first:
                out.append(g)
                continue
            twin = torch.Generator(device=self.device)
            twin.set_state(state)
            out.append(twin)
        return out
