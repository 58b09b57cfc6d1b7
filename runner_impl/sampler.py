"""Token sampling shared by both runners, in vLLM's order: the logit bias and the
penalties on the raw logits (they change a greedy row's argmax too), then temperature,
min-p, top-k and top-p, then a draw.

Randomness comes only from per-request generators, drawn in a fixed order (see
`row_noise`), so a request's tokens depend on its seed and not on its batch mates.
Sampling uses the exponential race (argmax p/E, E ~ Exp(1)), which is exact and needs
no `multinomial` (a sync on some backends).

Every step of work past greedy and temperature/top-k/top-p is gated by a host fact of the
batch (`BatchParams`: None when no row uses it), so a batch that uses none of it runs
exactly the ops it ran before they existed (the stored op-count references hold).

The V2 runner hands `sample` its fault switches; V1, the reference, never does. The
pre-fix paths of the sampling faults each take one shape of batch (`_pre_fix_probs`), so
each breaks one parameter set of the `sampled` sweep and leaves the others alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .sampling_params import SamplingParams

if TYPE_CHECKING:
    from .faults import FaultSet

_EPS = 1e-6


def make_generator(seed: int, device: torch.device) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


@dataclass
class LogitBias:
    """Each row's biased tokens, padded with token 0 and bias 0.0 (adding 0 is a no-op)."""
    token_ids: torch.Tensor       # [R, B] int64
    bias: torch.Tensor            # [R, B] float32


@dataclass
class Penalties:
    """Each row's penalties and token statistics; a row without penalties carries the
    neutral values (1, 0, 0), which leave its logits as they are."""
    repetition: torch.Tensor      # [R]
    frequency: torch.Tensor       # [R]
    presence: torch.Tensor        # [R]
    prompt_mask: torch.Tensor     # [R, V] bool: the token is in the prompt
    output_counts: torch.Tensor   # [R, V] int: times the token was sampled so far


def apply_logit_bias(logits: torch.Tensor, bias: LogitBias,
                     faults: "FaultSet | None" = None) -> torch.Tensor:
    if faults is not None and faults.active("logit-bias-overwrites"):
        # The pre-fix write (the class of vLLM PR 19041's one index_put_, right only with
        # accumulate=True): each biased token's logit becomes its bias.
        return logits.scatter(-1, bias.token_ids, bias.bias)
    return logits.scatter_add(-1, bias.token_ids, bias.bias)


def apply_penalties(logits: torch.Tensor, pen: Penalties) -> torch.Tensor:
    """vLLM's penalties (`apply_penalties`, OpenAI's definitions): the repetition penalty
    divides a positive logit and multiplies a negative one of every token seen in the
    prompt or the output; the frequency penalty subtracts per output occurrence, the
    presence penalty once per token that occurred in the output."""
    in_output = pen.output_counts > 0
    rep = torch.where(pen.prompt_mask | in_output, pen.repetition[:, None], 1.0)
    logits = logits * torch.where(logits > 0, 1.0 / rep, rep)
    logits = logits - pen.frequency[:, None] * pen.output_counts
    return logits - pen.presence[:, None] * in_output


def process_raw_logits(logits: torch.Tensor, params: "BatchParams",
                       faults: "FaultSet | None" = None) -> torch.Tensor:
    """The logit bias, then the penalties (vLLM's order: bias adds, penalties scale, and the
    two do not commute), in float32; only the parts some row of the batch uses."""
    logits = logits.float()
    if params.logit_bias is not None:
        logits = apply_logit_bias(logits, params.logit_bias, faults)
    if params.penalties is not None:
        logits = apply_penalties(logits, params.penalties)
    return logits


def apply_min_p(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Mask tokens less likely than min_p x the row's most likely token, on the tempered
    logits (p_i < min_p p_max  <=>  l_i < l_max + log min_p; min_p 0 gives -inf: off)."""
    threshold = logits.amax(-1, keepdim=True) + min_p.log()[:, None]
    return logits.masked_fill(logits < threshold, float("-inf"))


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
                 top_p: torch.Tensor, use_top_k_top_p: bool,
                 min_p: torch.Tensor | None = None) -> torch.Tensor:
    """Sampling distribution of each row (logits [..., R, V] or [R, W, V]): temperature,
    then min-p (None: no row uses it), then top-k / top-p."""
    shape = logits.shape
    flat = logits.reshape(-1, shape[-1])
    reps = flat.shape[0] // temperature.shape[0]
    t = temperature.clamp(min=_EPS).repeat_interleave(reps)
    flat = flat / t[:, None]
    if min_p is not None:
        flat = apply_min_p(flat, min_p.repeat_interleave(reps))
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


def sample(logits: torch.Tensor, params: "BatchParams",
           faults: "FaultSet | None" = None) -> torch.Tensor:
    """One token per row [R] from logits [R, V]. `faults`: the V2 runner's switches (None:
    the fixed code only)."""
    if params.logit_bias is not None or params.penalties is not None:
        logits = process_raw_logits(logits, params, faults)
    greedy_tok = logits.argmax(-1)
    if not params.any_random:
        return greedy_tok
    greedy = params.temperature == 0
    probs = _pre_fix_probs(logits, params, faults) if faults is not None else None
    if probs is None:
        probs = target_probs(logits, params.temperature, params.top_k, params.top_p,
                             params.use_top_k_top_p, params.min_p)
    if faults is not None and faults.active("seeded-greedy-sampled"):
        probs, greedy = _greedy_by_class(logits, params, probs)
    _, e = row_noise(params.generators, [0] * len(params.generators), logits.shape[-1],
                     logits.device)
    return torch.where(greedy, greedy_tok, (probs / e).argmax(-1))


def _greedy_by_class(logits: torch.Tensor, params: "BatchParams", probs: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """`seeded-greedy-sampled`'s pre-fix path: a row is greedy by its class (no generator:
    the V2 runner classed it greedy), not by its temperature, and the guard that keeps a
    temperature of 0 out of the division is keyed on the class too. A row classed random at
    temperature 0 divides its logits by 0: inf and NaN, and a token drawn from them."""
    random_class = torch.tensor([g is not None for g in params.generators],
                                device=logits.device)
    zero = params.temperature == 0
    unguarded = (logits.float() / params.temperature[:, None]).softmax(-1)
    return torch.where((zero & random_class)[:, None], unguarded, probs), ~random_class & zero


def _pre_fix_probs(logits: torch.Tensor, params: "BatchParams",
                   faults: "FaultSet") -> torch.Tensor | None:
    """The sampling distribution of a sampling fault's pre-fix path, where the batch takes
    one; None: the fixed path (`target_probs`). Each path is chosen by the batch's host
    facts, as vLLM's sampler dispatches (no filter; top-k alone; top-p alone; both), so a
    fault breaks the batches of one shape only. `logits`: after the bias and penalties."""
    if not faults.any():
        return None
    top_k, top_p = params.any_top_k, params.any_top_p
    plain = params.min_p is None and params.logit_bias is None and params.penalties is None
    if plain and not (top_k or top_p) and faults.active("temperature-only-unprocessed"):
        # A batch that needs no filter and no logit processor draws from the raw logits:
        # the temperature's launch is gated on the filters' flags.
        return logits.float().softmax(-1)
    if (top_k and not top_p and params.min_p is None
            and faults.active("fused-top-k-raw-logits")):
        # The top-k-only fast path masks and draws from the logits it was handed, which
        # the temperature never reached.
        return apply_top_k_top_p(logits.float(), params.top_k, params.top_p).softmax(-1)
    if top_p and not top_k and faults.active("top-p-without-top-k"):
        # The dispatch reads "no top-k" as "no filter": top-p is dropped with it.
        return target_probs(logits, params.temperature, params.top_k, params.top_p, False,
                            params.min_p)
    if top_k and top_p and faults.active("top-p-dropped-with-top-k"):
        # The dispatch takes its top-k branch for any batch that uses top-k: top-p is
        # dropped with it.
        return target_probs(logits, params.temperature, params.top_k,
                            torch.ones_like(params.top_p), True, params.min_p)
    return None


class BatchParams:
    """Sampling parameters of one batch, as device tensors plus the host facts that
    decide which work to do (so no device value is read on the host). `any_top_k` /
    `any_top_p`: some row uses top-k / top-p (the filter runs when either does; the
    sampling faults' pre-fix paths dispatch on each). `min_p`, `logit_bias` and
    `penalties` are None when no row of the batch uses them."""

    def __init__(self, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                 generators: list[torch.Generator | None], any_random: bool,
                 any_top_k: bool, any_top_p: bool, min_p: torch.Tensor | None = None,
                 logit_bias: LogitBias | None = None,
                 penalties: Penalties | None = None) -> None:
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.generators = generators
        self.any_random = any_random
        self.any_top_k, self.any_top_p = any_top_k, any_top_p
        self.min_p, self.logit_bias, self.penalties = min_p, logit_bias, penalties

    @property
    def use_top_k_top_p(self) -> bool:
        """Some row uses top-k or top-p: the batch runs the filter."""
        return self.any_top_k or self.any_top_p

    @classmethod
    def from_params(cls, params: list[SamplingParams], generators: list[torch.Generator | None],
                    samples: list[bool], device: torch.device,
                    tokens: list[tuple[int, list[int]]] | None = None,
                    vocab_size: int = 0) -> "BatchParams":
        """Build from per-request SamplingParams (the V1 way: rebuilt every step).
        `tokens`: each request's (prompt length, prompt + output token ids), which the
        penalties count; needed only when a request uses penalties."""
        t = torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device)
        k = torch.tensor([p.top_k for p in params], dtype=torch.int64, device=device)
        p_ = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device)
        gens = [g if (not p.greedy and s) else None
                for p, g, s in zip(params, generators, samples)]
        min_p = (torch.tensor([p.min_p for p in params], dtype=torch.float32, device=device)
                 if any(p.min_p > 0 for p in params) else None)
        return cls(t, k, p_, gens, any(g is not None for g in gens),
                   any(p.top_k > 0 for p in params), any(p.top_p < 1 for p in params), min_p,
                   _logit_bias(params, device), _penalties(params, tokens, vocab_size, device))


def _logit_bias(params: list[SamplingParams], device: torch.device) -> LogitBias | None:
    if not any(p.logit_bias for p in params):
        return None
    width = max(len(p.logit_bias or {}) for p in params)
    ids = [[*(p.logit_bias or {})] + [0] * (width - len(p.logit_bias or {})) for p in params]
    vals = [[*(p.logit_bias or {}).values()] + [0.0] * (width - len(p.logit_bias or {}))
            for p in params]
    return LogitBias(torch.tensor(ids, dtype=torch.int64, device=device),
                     torch.tensor(vals, dtype=torch.float32, device=device))


def _penalties(params: list[SamplingParams], tokens: list[tuple[int, list[int]]] | None,
               V: int, device: torch.device) -> Penalties | None:
    """The statistics counted afresh from each request's token list (V1 keeps no state)."""
    if not any(p.uses_penalties for p in params):
        return None
    assert tokens is not None and V > 0, "penalties need each request's tokens"
    def at(part: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(row, token) of each request's prompt (or output) tokens, split on the host."""
        pairs = [(r, t) for r, (plen, toks) in enumerate(tokens)
                 for t in (toks[:plen] if part == "prompt" else toks[plen:])]
        return torch.tensor(pairs, dtype=torch.int64, device=device).view(-1, 2).unbind(1)
    prompt_mask = torch.zeros(len(params), V, dtype=torch.bool, device=device)
    prompt_mask[at("prompt")] = True
    counts = torch.zeros(len(params), V, dtype=torch.int64, device=device)
    rows, toks = at("output")
    counts.index_put_((rows, toks), torch.ones_like(toks), accumulate=True)
    f32 = lambda xs: torch.tensor(xs, dtype=torch.float32, device=device)  # noqa: E731
    return Penalties(f32([p.repetition_penalty for p in params]),
                     f32([p.frequency_penalty for p in params]),
                     f32([p.presence_penalty for p in params]), prompt_mask, counts)
