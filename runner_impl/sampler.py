"""Token sampling shared by both runners: greedy, temperature, top-k, top-p.

Randomness comes only from per-request generators, drawn in a fixed order (see
`row_noise`), so a request's tokens depend on its seed and not on its batch mates.
Sampling uses the exponential race (argmax p/E, E ~ Exp(1)), which is exact and needs
no `multinomial` (a sync on some backends).
"""
from __future__ import annotations

import torch

from .sampling_params import SamplingParams

_EPS = 1e-6


def make_generator(seed: int, device: torch.device) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def apply_top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor,
                      top_p: torch.Tensor) -> torch.Tensor:
    """Mask logits outside each row's top-k and nucleus top-p (k = 0 / p = 1: off)."""
    V = logits.shape[-1]
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    rank = torch.arange(V, device=logits.device)
    k = torch.where(top_k > 0, top_k, V).clamp(max=V)
    drop = rank[None, :] >= k[:, None]
    probs = sorted_logits.masked_fill(drop, float("-inf")).softmax(-1)
    drop |= (probs.cumsum(-1) - probs) > top_p[:, None]   # keep until mass >= top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


def target_probs(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                 top_p: torch.Tensor, use_top_k_top_p: bool) -> torch.Tensor:
    """Sampling distribution of each row (logits [..., R, V] or [R, W, V])."""
    shape = logits.shape
    flat = logits.reshape(-1, shape[-1])
    reps = flat.shape[0] // temperature.shape[0]
    t = temperature.clamp(min=_EPS).repeat_interleave(reps)
    flat = flat / t[:, None]
    if use_top_k_top_p:
        flat = apply_top_k_top_p(flat, top_k.repeat_interleave(reps),
                                 top_p.repeat_interleave(reps))
    return flat.softmax(-1).view(shape)


def row_noise(generators: list[torch.Generator | None], num_uniform: list[int], V: int,
              device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: `num_uniform` U(0,1) draws (acceptance tests), then V Exp(1) draws.

    Rows without a generator (greedy, or a sample that will be dropped) draw nothing.
    Returns (uniform [R, max(num_uniform)] padded with 2.0 = never accept, exp [R, V]).
    """
    D = max(num_uniform, default=0)
    us, es = [], []
    for g, d in zip(generators, num_uniform):
        if g is None:
            us.append(torch.full((D,), 2.0, device=device))
            es.append(torch.ones(V, device=device))
            continue
        u = torch.rand(d, generator=g, device=device)
        us.append(torch.cat([u, torch.full((D - d,), 2.0, device=device)]) if d < D else u)
        es.append(torch.empty(V, device=device).exponential_(generator=g))
    return torch.stack(us) if us else torch.empty(0, D, device=device), torch.stack(es)


def sample(logits: torch.Tensor, params: "BatchParams") -> torch.Tensor:
    """One token per row [R] from logits [R, V]."""
    greedy_tok = logits.argmax(-1)
    if not params.any_random:
        return greedy_tok
    probs = target_probs(logits, params.temperature, params.top_k, params.top_p,
                         params.use_top_k_top_p)
    _, e = row_noise(params.generators, [0] * len(params.generators), logits.shape[-1],
                     logits.device)
    return torch.where(params.temperature == 0, greedy_tok, (probs / e).argmax(-1))


class BatchParams:
    """Sampling parameters of one batch, as device tensors plus the host facts that
    decide which work to do (so no device value is read on the host)."""

    def __init__(self, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                 generators: list[torch.Generator | None], any_random: bool,
                 use_top_k_top_p: bool) -> None:
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.generators = generators
        self.any_random = any_random
        self.use_top_k_top_p = use_top_k_top_p

    @classmethod
    def from_params(cls, params: list[SamplingParams], generators: list[torch.Generator | None],
                    samples: list[bool], device: torch.device) -> "BatchParams":
        """Build from per-request SamplingParams (the V1 way: rebuilt every step)."""
        t = torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device)
        k = torch.tensor([p.top_k for p in params], dtype=torch.int64, device=device)
        p_ = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device)
        gens = [g if (not p.greedy and s) else None
                for p, g, s in zip(params, generators, samples)]
        return cls(t, k, p_, gens, any(g is not None for g in gens),
                   any(p.top_k > 0 or p.top_p < 1 for p in params))
