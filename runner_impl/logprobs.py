"""Logprobs of generated tokens, as vLLM returns them, computed by both runners with this code.

Per generated token: its logprob, its rank in the vocabulary and the top-N (token id,
logprob) of the position, for a request that asked for N (`SamplingParams.logprobs`). What
the logprobs are of is the engine's `logprobs_mode`, as vLLM names it
(vllm/v1/sample/sampler.py):
- `raw_logprobs`: the log-softmax (float32) of the model's logits before any processing;
- `processed_logprobs`: the log-softmax of the logits the sampler draws from: after the
  logit bias and the penalties, divided by the temperature, then min-p and the top-k /
  top-p masks (a masked token's logprob is -inf). A greedy row takes its argmax after the
  bias and penalties alone (vLLM resets a greedy request's filters), so its processed
  logprobs are those logits' log-softmax.

The work is device work only, sized by host facts (the batch's largest N, whether any row
samples), so V2 queues it with the step and copies it out with the sampled tokens: nothing
is read back before the step's output copy. A batch in which no request asked does none of
it: the runners call `compute` only when one did.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from .faults import FaultSet
from .sampler import BatchParams, apply_min_p, apply_top_k_top_p, process_raw_logits
from .sampling_params import SamplingParams

LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs")
NONE = -1                    # a slot's or row's N when its request asked for no logprobs


@dataclass
class TokenLogprobs:
    """One generated token's logprobs: vLLM's `Logprob` dict of the position, flattened."""

    logprob: float                      # the generated token's
    rank: int                           # 1 + the tokens more likely (ties count, as vLLM's)
    top: list[tuple[int, float]]        # the top-N (token id, logprob), most likely first


def select_rows(params: BatchParams, rows: torch.Tensor) -> BatchParams:
    """`params` of each logits row: the batch row `rows[i]`'s parameters at row i (a
    request's drafts and its bonus token share its parameters)."""
    def pick(x):
        if x is None:
            return None
        if dataclasses.is_dataclass(x):        # per-row tensors (logit bias, penalties)
            return type(x)(*(getattr(x, f.name)[rows] for f in dataclasses.fields(x)))
        return x[rows]
    return BatchParams(pick(params.temperature), pick(params.top_k), pick(params.top_p),
                       [], params.any_random, params.any_top_k, params.any_top_p,
                       pick(params.min_p), pick(params.logit_bias), pick(params.penalties))


def processed_logits(logits: torch.Tensor, params: BatchParams,
                     masks: bool = True) -> torch.Tensor:
    """The logits each row is sampled from, in vLLM's order (runner_impl/sampler.py
    `sample`): the logit bias and the penalties, then (rows that sample at random) the
    temperature, min-p and the top-k / top-p masks; a greedy row takes its argmax of the
    first two alone. `masks=False` leaves out min-p and top-k / top-p (the fault's path)."""
    if params.logit_bias is not None or params.penalties is not None:
        logits = process_raw_logits(logits, params)
    if not params.any_random:
        return logits
    greedy = params.temperature == 0
    out = logits.float() / torch.where(greedy, 1.0, params.temperature)[:, None]
    if masks and params.min_p is not None:
        out = apply_min_p(out, torch.where(greedy, 0.0, params.min_p))
    if masks and params.use_top_k_top_p:
        out = apply_top_k_top_p(out, torch.where(greedy, 0, params.top_k),
                                torch.where(greedy, 1.0, params.top_p))
    return out


def compute(logits: torch.Tensor, token_ids: torch.Tensor, num: int, mode: str,
            params: BatchParams, row_of: torch.Tensor | None = None,
            faults: FaultSet | None = None) -> torch.Tensor:
    """Logprobs of `token_ids` [M] under `logits` [M, V], packed for one copy to the host:
    [M, 2 + 2 * num] float64, per row the token's logprob, its rank, the top-`num` token
    ids, then their logprobs (float64 holds a token id exactly). `row_of` [M]: the batch
    row (of `params`) each logits row belongs to; None = the same row."""
    x = logits
    if mode == "processed_logprobs":
        # The fault's pre-fix path: processed logprobs taken after the temperature but
        # before the top-k / top-p masks (the logits of a distribution never sampled).
        masks = not (faults is not None and faults.active("processed-logprobs-unmasked"))
        x = processed_logits(logits, params if row_of is None else select_rows(params, row_of),
                             masks)
    lp = x.log_softmax(-1, dtype=torch.float32)
    tok = lp.gather(1, token_ids[:, None])
    parts = [tok.double(), (lp >= tok).sum(-1, keepdim=True).double()]
    if num:
        vals, ids = lp.topk(num, dim=-1)
        parts += [ids.double(), vals.double()]
    return torch.cat(parts, 1)


def unpack(rows: np.ndarray, num: int) -> list[TokenLogprobs]:
    """`compute`'s rows on the host, each cut to the `num` its request asked for."""
    width = (rows.shape[1] - 2) // 2
    return [TokenLogprobs(float(r[0]), int(r[1]),
                          [(int(r[2 + j]), float(r[2 + width + j])) for j in range(num)])
            for r in rows]


@dataclass
class StepLogprobs:
    """One V2 step's logprobs: `compute`'s output for every logits row of the batch, and
    the host facts that cut it per request once it is on the host."""

    packed: torch.Tensor                # [R * W, 2 + 2n]: on the device until the output copy
    num: np.ndarray                     # [R] the N each row's request asked (NONE: none)
    width: int                          # W: logits rows per batch row (1 + drafts)

    def per_request(self, host: np.ndarray, counts: np.ndarray
                    ) -> list[list[TokenLogprobs] | None]:
        """Per batch row: the logprobs of the `counts[r]` tokens it kept, or None."""
        W = self.width
        return [None if n == NONE else unpack(host[r * W:r * W + int(c)], int(n))
                for r, (n, c) in enumerate(zip(self.num, counts))]


class SlotLogprobs:
    """The N each of V2's persistent slots asked for: a host fact, the only copy (it sizes
    the batch's top-k and decides whether there is any logprob work; the device never
    needs it)."""

    def __init__(self, max_num_reqs: int) -> None:
        self.num = np.full(max_num_reqs, NONE, dtype=np.int64)   # host, truth

    def add_request(self, slot: int, params: SamplingParams) -> None:
        self.num[slot] = NONE if params.logprobs is None else params.logprobs

    def batch(self, idx_np: np.ndarray) -> np.ndarray | None:
        """The batch rows' N, or None when no row asked (the step does no logprob work)."""
        num = self.num[idx_np]
        return None if (num == NONE).all() else num
