"""Vectorised rejection sampling for speculative decoding (no host reads).

Returns `[R, 1 + D]` token ids with -1 at rejected positions; accepted drafts are
contiguous from position 0 and are followed by one recovered or bonus token.
Greedy rows use strict matching against the target argmax; random rows accept draft x
with probability min(1, p(x)/q(x)) and on rejection sample from max(p - q, 0).
The `strict-acceptance` fault (faults.py) never accepts a step's last draft: that position
takes the target's own token instead (the argmax; a sample of p), so the output keeps its
law and only the accepted count falls. A host-side switch: the clean path runs no extra op.
"""
from __future__ import annotations

import torch

from ..faults import FaultSet
from ..sampler import BatchParams, row_noise, target_probs


def rejection_sample(logits: torch.Tensor, drafts: torch.Tensor, num_drafts: torch.Tensor,
                     num_drafts_host: list[int], params: BatchParams,
                     draft_probs: torch.Tensor | None,
                     faults: FaultSet | None = None) -> torch.Tensor:
    """logits [R, 1+D, V]; drafts [R, D]; num_drafts [R] (<= D); draft_probs [R, D, V] or
    None (n-gram drafts: q is one-hot)."""
    cut = faults is not None and faults.active("strict-acceptance")
    R, W, V = logits.shape
    D = W - 1
    cols = torch.arange(W, device=logits.device)
    valid = cols[None, :D] < num_drafts[:, None]
    target_argmax = logits.argmax(-1)
    num_acc = ((drafts == target_argmax[:, :D]) & valid).int().cumprod(1).sum(1)
    if cut:           # the last draft is never accepted; its position takes the argmax
        last = (num_drafts - 1).clamp(min=0)
        num_acc = torch.minimum(num_acc, last)
    final = target_argmax.gather(1, num_acc[:, None])[:, 0]

    if params.any_random:
        p = target_probs(logits, params.temperature, params.top_k, params.top_p,
                         params.use_top_k_top_p)
        safe = drafts.clamp(min=0)[..., None]
        px = p[:, :D].gather(2, safe)[..., 0]
        qx = draft_probs.gather(2, safe)[..., 0] if draft_probs is not None \
            else torch.ones_like(px)
        u, e = row_noise(params.generators, num_drafts_host, V, logits.device)
        r_acc = ((u[:, :D] * qx <= px) & valid).int().cumprod(1).sum(1)
        if cut:       # rows that reach their last draft sample p there, draft or not
            reach = r_acc >= last
            r_acc = torch.minimum(r_acc, last)
        p_at = p.gather(1, r_acc[:, None, None].expand(R, 1, V))[:, 0]
        rejected = (r_acc < num_drafts)[:, None]
        if cut:
            rejected = rejected & ~reach[:, None]
        at = r_acc.clamp(max=max(D - 1, 0))
        if D == 0:
            q_at = torch.zeros_like(p_at)
        elif draft_probs is not None:
            q_at = draft_probs.gather(1, at[:, None, None].expand(R, 1, V))[:, 0]
        else:
            q_at = torch.nn.functional.one_hot(drafts.gather(1, at[:, None])[:, 0].clamp(min=0),
                                               V).to(p.dtype)
        resid = (p_at - q_at * rejected).clamp(min=0)
        resid = torch.where(resid.sum(-1, keepdim=True) > 0, resid, p_at)
        greedy = params.temperature == 0
        num_acc = torch.where(greedy, num_acc, r_acc)
        final = torch.where(greedy, final, (resid / e).argmax(-1))

    padded = torch.cat([drafts, drafts.new_full((R, 1), -1)], 1)
    return torch.where(cols[None] < num_acc[:, None], padded,
                       torch.where(cols[None] == num_acc[:, None], final[:, None], -1))


def count_sampled(out: torch.Tensor, faults: FaultSet) -> torch.Tensor:
    """Number of valid tokens per row of the rejection sampler's output."""
    if faults.active("accept-count-cat-argmax"):
        # Pre-PR-38372 path: append a -1 sentinel column, argmax the first -1.
        sentinel = out.new_full((out.shape[0], 1), -1)
        return (torch.cat([out, sentinel], dim=1) == -1).int().argmax(dim=1)
    return (out != -1).sum(dim=1)
