"""Per-slot sampling state for the V2 runner: parameters live on the device per slot.

A slot's device values are written when a request is admitted to it. The parameters most
requests leave at their defaults (min-p, the penalties, the logit bias) are written only
when the new request uses them or the slot still holds a previous occupant's non-default
value (a host copy of what was written tells which), so a run that uses none of them
stages exactly the uploads it staged before they existed.

Penalties keep statistics per slot on the device, as MRv2's `PenaltiesState` does: which
tokens the prompt holds and how often each was sampled. They are reset and recounted when a
request that uses penalties is admitted; the bug MRv2's penalties refactor carried in review
(vLLM PR 34662) was a reset that reset nothing, so a reused slot's counts leaked into its
next occupant (`penalty-slot-reuse` restores it).
"""
from __future__ import annotations

import numpy as np
import torch

from ..engine.outputs import NewRequestData
from ..faults import FaultSet
from ..sampler import BatchParams, LogitBias, Penalties, make_generator
from ..sampling_params import SamplingParams
from .staging import PinnedStaging

MAX_LOGIT_BIAS_TOKENS = 1024      # per request, as MRv2 (`MAX_NUM_LOGIT_BIAS_TOKENS`)


class SamplingState:
    def __init__(self, max_num_reqs: int, vocab_size: int, device: torch.device,
                 staging: PinnedStaging, faults: FaultSet | None = None) -> None:
        self.device = device
        self.vocab_size = vocab_size
        self.faults = faults or FaultSet()
        self.staging = staging
        self._staged: list[tuple[int, float, int, float]] = []
        # (slot, min_p, repetition, frequency, presence) and (slot, token ids, biases)
        self._staged_extra: list[tuple[int, float, float, float, float]] = []
        self._staged_bias: list[tuple[int, list[int], list[float]]] = []
        # (slot, prompt length, prompt + output tokens) of requests that use penalties
        self._staged_counts: list[tuple[int, int, list[int]]] = []
        n, f32 = max_num_reqs, dict(dtype=torch.float32, device=device)
        # Device, truth: per-slot parameters, gathered by idx_mapping each step.
        self.temperature = torch.zeros(n, **f32)
        self.top_k = torch.zeros(n, dtype=torch.int64, device=device)
        self.top_p = torch.ones(n, **f32)
        self.min_p = torch.zeros(n, **f32)
        self.repetition_penalty = torch.ones(n, **f32)
        self.frequency_penalty = torch.zeros(n, **f32)
        self.presence_penalty = torch.zeros(n, **f32)
        # Device, truth: each slot's biased tokens and their biases, the first
        # num_bias[slot] columns valid, the rest token 0 with bias 0.0 (a no-op to add).
        self.bias_token_ids = torch.zeros(n, MAX_LOGIT_BIAS_TOKENS, dtype=torch.int64,
                                          device=device)
        self.bias = torch.zeros(n, MAX_LOGIT_BIAS_TOKENS, **f32)
        # Device, truth: penalty statistics per slot, [slots, vocab] each, allocated when
        # the first request that uses penalties arrives (large for a large vocabulary, and
        # most engines never use them). prompt_mask: the token is in the prompt;
        # output_counts: times it was sampled. Counted for every row of a step that
        # samples with penalties (post-step), reset for a penalty request on admission.
        self.prompt_mask: torch.Tensor | None = None
        self.output_counts: torch.Tensor | None = None
        # Host copies of the device values above (written with them, never read back):
        # which slots hold non-default values a new occupant must overwrite.
        self.extra_np = np.tile(np.array([0.0, 1.0, 0.0, 0.0], dtype=np.float32), (n, 1))
        self.num_bias = np.zeros(n, dtype=np.int64)
        # Host facts of each slot's request, to decide which work a batch needs.
        self.is_random = np.zeros(n, dtype=bool)
        self.uses_top_k = np.zeros(n, dtype=bool)
        self.uses_top_p = np.zeros(n, dtype=bool)
        self.seeded = np.zeros(n, dtype=bool)     # the request named its seed
        self.uses_min_p = np.zeros(n, dtype=bool)
        self.uses_penalties = np.zeros(n, dtype=bool)
        self.generators: list[torch.Generator | None] = [None] * n
        # `unseeded-batch-drops-seeds`' one random state for a whole batch (made on use)
        self._batch_generator: torch.Generator | None = None

    def add_request(self, slot: int, new: NewRequestData) -> None:
        sp = new.sampling_params
        # `seeded-greedy-sampled` (a stand-in for the class of vLLM PR 27077): a request is
        # classed by its seed before its temperature, so a seeded greedy request is classed
        # random (the sampler then divides by its temperature, 0: sampler.py).
        self.is_random[slot] = not sp.greedy or (
            sp.seed is not None and self.faults.active("seeded-greedy-sampled"))
        self.uses_top_k[slot] = sp.top_k > 0
        self.uses_top_p[slot] = sp.top_p < 1
        self.seeded[slot] = sp.seed is not None
        self.generators[slot] = make_generator(new.seed, self.device)
        self._staged.append((slot, sp.temperature, sp.top_k, sp.top_p))
        self._stage_extra(slot, sp)
        if sp.uses_penalties:
            self._staged_counts.append((slot, len(new.prompt_token_ids),
                                        list(new.all_token_ids)))

    def _stage_extra(self, slot: int, sp: SamplingParams) -> None:
        """Stage min-p, the penalties and the logit bias of a slot when the request uses
        them or the slot still holds a previous request's."""
        extra = np.array([sp.min_p, sp.repetition_penalty, sp.frequency_penalty,
                          sp.presence_penalty], dtype=np.float32)
        self.uses_min_p[slot] = sp.min_p > 0
        self.uses_penalties[slot] = sp.uses_penalties
        if (extra != self.extra_np[slot]).any():
            self.extra_np[slot] = extra
            self._staged_extra.append((slot, *extra.tolist()))
        bias = sp.logit_bias or {}            # <= MAX_LOGIT_BIAS_TOKENS (LLM.add_request)
        if bias or self.num_bias[slot]:
            width = max(len(bias), int(self.num_bias[slot]))   # zero what the last one set
            pad = width - len(bias)
            self._staged_bias.append((slot, [*bias] + [0] * pad,
                                      [*bias.values()] + [0.0] * pad))
            self.num_bias[slot] = len(bias)

    def apply_staged_writes(self) -> None:
        if self._staged:
            vals = self.staging.upload(self._staged, torch.float32)     # [m, 4]
            slots = vals[:, 0].long()
            self.temperature[slots] = vals[:, 1]
            self.top_k[slots] = vals[:, 2].long()
            self.top_p[slots] = vals[:, 3]
            self._staged = []
        if self._staged_extra:
            vals = self.staging.upload(self._staged_extra, torch.float32)  # [m, 5]
            slots = vals[:, 0].long()
            self.min_p[slots] = vals[:, 1]
            self.repetition_penalty[slots] = vals[:, 2]
            self.frequency_penalty[slots] = vals[:, 3]
            self.presence_penalty[slots] = vals[:, 4]
            self._staged_extra = []
        if self._staged_bias:
            self._apply_bias_writes()
        if self._staged_counts:
            self._count_admitted()

    def _apply_bias_writes(self) -> None:
        rows = [s for s, ids, _ in self._staged_bias for _ in ids]
        cols = [j for _, ids, _ in self._staged_bias for j in range(len(ids))]
        ids = [t for _, row, _ in self._staged_bias for t in row]
        at = self.staging.upload([rows, cols, ids])
        self.bias_token_ids[at[0], at[1]] = at[2]
        self.bias[at[0], at[1]] = self.staging.upload(
            [b for _, _, row in self._staged_bias for b in row], torch.float32)
        self._staged_bias = []

    def _count_admitted(self) -> None:
        """Reset the admitted penalty requests' statistics and count their tokens: the
        prompt into prompt_mask, any outputs they arrive with (a resumed request, a PD
        import) into output_counts (MRv2's `bincount`)."""
        if self.output_counts is None:
            V, n = self.vocab_size, self.temperature.shape[0]
            self.prompt_mask = torch.zeros(n, V, dtype=torch.bool, device=self.device)
            self.output_counts = torch.zeros(n, V, dtype=torch.int32, device=self.device)
        up = self.staging.upload
        slots = up([s for s, _, _ in self._staged_counts])
        if self.faults.active("penalty-slot-reuse"):
            # The pre-fix reset of vLLM PR 34662's first revision: indexing with a tensor
            # copies, so zero_() clears the copy and the slot keeps its old statistics.
            self.prompt_mask[slots].zero_()
            self.output_counts[slots].zero_()
        else:
            self.prompt_mask.index_fill_(0, slots, False)
            self.output_counts.index_fill_(0, slots, 0)
        # split on the host: a boolean mask on the device would size its result by a read
        prompt = [(s, t) for s, plen, toks in self._staged_counts for t in toks[:plen]]
        pr, pt = up(list(zip(*prompt))).unbind(0)
        self.prompt_mask[pr, pt] = True
        output = [(s, t) for s, plen, toks in self._staged_counts for t in toks[plen:]]
        if output:                        # resumed and PD-imported requests arrive with some
            orow, otok = up(list(zip(*output))).unbind(0)
            self.output_counts.index_put_((orow, otok), torch.ones_like(otok, dtype=torch.int32),
                                          accumulate=True)
        self._staged_counts = []

    def batch_params(self, idx_np: np.ndarray, idx: torch.Tensor,
                     samples_token: np.ndarray, lazy: bool = False) -> BatchParams:
        """lazy: a one-logit batch whose greedy rows never read the per-row tensors
        (`sample` returns the argmax), so an all-greedy batch skips gathering them."""
        rand = self.is_random[idx_np]
        any_random = bool(rand.any())
        bias_width = int(self.num_bias[idx_np].max(initial=0))
        penalties = bool(self.uses_penalties[idx_np].any())
        if lazy and not any_random and not bias_width and not penalties:
            return BatchParams(None, None, None, [None] * len(idx_np), False, False, False)
        # The `partial-prefill-noise` fault's pre-fix path (the class of vLLM PR 10097):
        # a prefill chunk whose sample is dropped still draws its request's noise.
        draw_dropped = self.faults.active("partial-prefill-noise")
        gens = [self.generators[s] if (r and (keep or draw_dropped)) else None
                for s, r, keep in zip(idx_np, rand, samples_token)]
        if self.faults.active("shared-sampling-noise") and any(g is not None for g in gens):
            gens = self._shared_noise(gens)
        if self.faults.active("unseeded-batch-drops-seeds") and any(
                g is not None and not self.seeded[s] for s, g in zip(idx_np, gens)):
            gens = self._unseeded_fast_path(gens)
        # `min-p-ignored` (the class of vLLM PR 13191): min-p is stored and never applied.
        min_p = (self.min_p[idx] if self.uses_min_p[idx_np].any()
                 and not self.faults.active("min-p-ignored") else None)
        bias = (LogitBias(self.bias_token_ids[idx, :bias_width], self.bias[idx, :bias_width])
                if bias_width else None)
        pen = (Penalties(self.repetition_penalty[idx], self.frequency_penalty[idx],
                         self.presence_penalty[idx], self.prompt_mask[idx],
                         self.output_counts[idx]) if penalties else None)
        return BatchParams(self.temperature[idx], self.top_k[idx], self.top_p[idx], gens,
                           any_random, bool(self.uses_top_k[idx_np].any()),
                           bool(self.uses_top_p[idx_np].any()), min_p, bias, pen)

    def count_sampled(self, idx: torch.Tensor, sampled: torch.Tensor,
                      num_sampled: torch.Tensor) -> None:
        """After a step that sampled with penalties: count each row's kept tokens into its
        slot's output_counts, on the device (MRv2 does it in post_update). Steps without
        penalties skip it; a penalty request's admission resets what they left stale."""
        R, W = sampled.shape
        keep = torch.arange(W, device=sampled.device)[None] < num_sampled[:, None]
        self.output_counts.index_put_((idx[:, None].expand(R, W), sampled.clamp(min=0)),
                                      keep.to(torch.int32), accumulate=True)

    def _unseeded_fast_path(self, gens: list[torch.Generator | None]
                            ) -> list[torch.Generator | None]:
        """`unseeded-batch-drops-seeds`' pre-fix path (vLLM PR 51866 fixed it): a batch
        with any unseeded sampling row takes the unseeded fast path, which draws every
        row's noise from one batch-wide random state, the seeded rows' generators unused."""
        if self._batch_generator is None:
            self._batch_generator = torch.Generator(device=self.device)
        return [None if g is None else self._batch_generator for g in gens]

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
