"""Fault switches: each restores the pre-fix code path of one historic MRv2 regression.

A switch only selects which code runs (see the `faults.active(...)` call sites, grep for
the fault name); it never touches a metric. The harness has to discover the damage. The
runner keeps its own switches (it imports nothing of the harness); the bundled target
registers them in the harness's fault registry (harness/run/faults.py), beside the vllm
target's and the slow-step ruler.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .errors import RunnerError


@dataclass(frozen=True)
class Fault:
    name: str
    vllm_pr: int
    bug_class: str
    code_path: str  # where the switch changes code, for people reading reports


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault("stale-slot-state", 39833, "stale per-slot state on slot reuse",
              "v2/states.py RequestState.add_request: last_sampled_tokens and "
              "draft_tokens of a reused slot are not initialised"),
        Fault("mirror-increment", 42202, "CPU mirror diverges from the device truth",
              "v2/states.py: the CPU mirror is advanced by num_scheduled_tokens in "
              "postprocess instead of being refreshed from the scheduler"),
        Fault("seq-lens-sync", 40654, "hidden device-to-host sync in the hot path",
              "v2/input_batch.py prepare_inputs: max_seq_len read from device seq_lens "
              "(seq_lens.cpu(), .max().item()) instead of the CPU upper bound"),
        Fault("accept-count-cat-argmax", 38372, "wasteful accepted-token counting",
              "v2/rejection_sampler.py count_sampled: cat a -1 column and argmax the "
              "first -1 instead of (out != -1).sum(1)"),
        Fault("warmup-short-prefill", 40746, "warmup misses the prefill path",
              "engine/warmup.py: the dummy prefill prompt has 2 tokens instead of 2 + k"),
    )
}

# Later MRv2 bugs outside the five bug classes (docs/checks.md), kept to prove the checks that
# cover them (chunked prefill, sampling, acceptance). Each is a real pre-fix code path too,
# selected with `--fault NAME`; none is in the default catch matrix (`FAULTS`), which stays
# the five historic classes (and the CI's time budget).
COVERAGE_FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault("strict-acceptance", 40651, "acceptance cut with no accuracy change",
              "v2/rejection_sampler.py rejection_sample: the step's last draft is never "
              "accepted; its position takes the target's own token (greedy: the argmax, "
              "which the draft matched; random: a sample of p, not of the residual), so the "
              "output is unchanged and fewer drafts count as accepted. A stand-in for MRv2's "
              "strict acceptance before PR 40651 (AL about -20 % with the same accuracy), "
              "which differs from standard acceptance only at temperature > 0; this cut "
              "bites greedy rows too"),
        Fault("shared-sampling-noise", 54282, "random noise shared where it must be independent",
              "v2/sampler.py SamplingState.batch_params: every sampling row of a step draws "
              "from one random state (the first row's generator) instead of its request's "
              "own, so rows of one step get the same noise. The class of vLLM PR 54282 "
              "(MRv2's draft and recovery Gumbel noise drawn from one Philox offset), not the "
              "PR's line: the bundled runner has no probabilistic draft path"),
        Fault("chunk-slot-mapping", 36580, "wrong KV slots for a middle prefill chunk",
              "v2/input_batch.py prepare_inputs: the slot mapping of a prefill chunk that "
              "samples nothing takes each token's offset in the chunk as its position, as "
              "if every such chunk began its prompt; right for a first chunk, so a prompt "
              "of 1 or 2 chunks is unaffected, but a middle chunk (>= 3 chunks) writes its "
              "KV over the first chunk's slots and leaves its own empty. The class of "
              "MRv2's _compute_slot_mappings_kernel bug fixed by PR 36580 (chunked "
              "prefill only), not the kernel's line"),
        Fault("penalty-slot-reuse", 34662, "stale per-slot penalty statistics on slot reuse",
              "v2/sampler.py SamplingState._count_admitted: the reset of a penalty "
              "request's slot is `prompt_mask[slots].zero_()` and "
              "`output_counts[slots].zero_()`, which zero a copy (tensor indexing copies), "
              "so the new occupant is penalised for its predecessor's prompt and output "
              "tokens. The line MRv2's penalties refactor (vLLM PR 34662) carried until "
              "review replaced it with an assignment; it bites only requests that use "
              "penalties, on a reused slot"),
        Fault("partial-prefill-noise", 10097, "seeded stream advanced by a dropped sample",
              "v2/sampler.py SamplingState.batch_params: a prefill chunk that stops short "
              "of its prompt (its sample is dropped) still draws its request's noise from "
              "the request's generator, so a seeded request prefilled in >= 2 chunks "
              "samples from a shifted stream. The class of vLLM PR 10097, which fixed V1's "
              "rewind of that generator (by 1 where CUDA's Philox offset moves by 4); the "
              "bundled runner never rewinds, it never draws"),
        Fault("min-p-ignored", 13191, "a sampling parameter accepted and never applied",
              "v2/sampler.py SamplingState.batch_params: min-p is stored per slot and never "
              "handed to the sampler, so a min-p request samples from its whole tempered "
              "distribution. vLLM's V1 sampler did so until PR 13191 (issue 12678: 'V1 "
              "engine ignores ... min-p sampling')"),
        Fault("seeded-greedy-sampled", 27077, "greedy rows taken for random rows",
              "v2/sampler.py SamplingState.add_request and sampler.py sample: a request is "
              "classed by its seed before its temperature, so a greedy request that names a "
              "seed is classed random; the sampler picks the argmax for the rows classed "
              "greedy and guards the division by the temperature for them alone, so such a "
              "row divides its logits by 0 and draws from inf and NaN (on CPU: token 0, "
              "every step). Unseeded "
              "greedy requests are unchanged. A stand-in for the class of vLLM PR 27077 "
              "(greedy rows the sampler no longer recognised after their stored temperature "
              "changed from -1 to 0: division by zero, NaN and Inf logits), not its line"),
        Fault("temperature-only-unprocessed", 34563, "the temperature skipped by a launch gate",
              "sampler.py sample (called by v2/model_runner.py _sample), _pre_fix_probs: a "
              "batch whose rows use no filter (top-k, top-p, min-p) and no logit processor "
              "(logit bias, penalties) draws from the softmax of its raw logits, the "
              "temperature never applied: its launch is gated on the filters' flags. A "
              "stand-in for the class of the host-side gate MRv2 put on its temperature "
              "kernel (vLLM PR 34563: the launch skipped when the batch's temperatures "
              "make it a no-op), gated here on the wrong facts; no MRv2 PR of this line "
              "was found"),
        Fault("fused-top-k-raw-logits", 26859, "a fused filter path fed untempered logits",
              "sampler.py sample (V2's call), _pre_fix_probs: a batch that uses top-k and "
              "neither top-p nor min-p takes a top-k-only fast path that masks and draws "
              "from the logits it was handed, which the temperature never reached, so a "
              "top-k request samples its top k at temperature 1. An engine that returns "
              "processed logprobs never takes it (v2/model_runner.py: the fused kernel it "
              "stands for returns no logits). A stand-in for the class "
              "of vLLM PR 26859 (FlashInfer's fused top-k / top-p sampling kernel, switched "
              "off by default after it gave 'the same output even when the temperature is "
              "quite high', issue 26480), not its kernel"),
        Fault("top-p-without-top-k", 13191, "a filter dropped on its own dispatch branch",
              "sampler.py sample (V2's call), _pre_fix_probs: the filter dispatch reads "
              "'no row uses top-k' as 'no filter', so a batch that uses top-p without top-k "
              "samples its whole tempered distribution (min-p still applies). A stand-in "
              "for the class of vLLM PR 13191 (a sampling parameter accepted and never "
              "applied: there min-p, here top-p on the branch without top-k); no vLLM PR "
              "of this line was found"),
        Fault("top-p-dropped-with-top-k", 13191, "a filter dropped on its own dispatch branch",
              "sampler.py sample (V2's call), _pre_fix_probs: the filter dispatch takes its "
              "top-k-only branch for any batch that uses top-k, so a batch that uses top-k "
              "and top-p together samples its whole top k, no nucleus cut (min-p still "
              "applies; `top-p-without-top-k` is the dispatch's other branch). A top-p "
              "near 1 cuts so little that dropping it barely moves a stream (the "
              "`mixed-seeds` and `chunked` sets: top-p 0.9999). A stand-in for the class of "
              "vLLM PR 13191 (a sampling parameter accepted and never applied: there min-p, "
              "here top-p beside top-k); no vLLM PR of this line was found"),
        Fault("logit-bias-overwrites", 19041, "a logit bias assigned instead of added",
              "sampler.py apply_logit_bias (V2's call): each biased token's logit is set to "
              "its bias (`scatter`) instead of shifted by it (`scatter_add`), so a request "
              "with a logit bias samples as if those tokens' logits were the biases. A "
              "stand-in for the class of vLLM PR 19041 (V1's logit bias rewritten as one "
              "index_put_, which adds only with accumulate=True), not a line of it"),
        Fault("unseeded-batch-drops-seeds", 51866,
              "a seeded stream lost to an unseeded batch mate",
              "v2/sampler.py SamplingState.batch_params: a batch in which any sampling row "
              "is unseeded takes the unseeded fast path, which draws every row's noise from "
              "one batch-wide random state, so a seeded request's stream depends on whether "
              "its batch mates named seeds. The pre-fix test of vLLM PR 51866 (issue 51226: "
              "the CPU sampler's `len(generators) != logits.shape[0]`, true as soon as one "
              "row is unseeded), which dropped every seeded request's generator"),
        Fault("processed-logprobs-unmasked", 37144,
              "processed logprobs not of the distribution sampled",
              "logprobs.py compute (called by v2/model_runner.py _sample): with "
              "logprobs_mode processed_logprobs, the logprobs are taken after the "
              "temperature but before the min-p and top-k / top-p masks, so a request "
              "sampled from its top-k gets logprobs normalised over the whole vocabulary. "
              "A stand-in for the class of vLLM PR 37144 (`[Model Runner V2] Fix "
              "processed logits in sample()`, processed logits that MRv2's sample() "
              "returns for the logprobs), not its line, which is not reproduced here; the "
              "tokens are unchanged, so only the logprobs show it"),
        Fault("resumed-prefill-len", 26385, "a resumed request's recompute fed stale slot state",
              "v2/states.py RequestState.add_request: a request resumed after preemption "
              "gets its prompt length as its prefill length, as if its prefill were a fresh "
              "prompt's, so the rows that recompute its earlier outputs count as decode rows "
              "and read the slot's last_sampled_tokens and draft_tokens, which a resumed "
              "request never set (the previous occupant's, or the state audit's poison). "
              "Only preemption makes prefill_len exceed prompt_len, so nothing else changes. "
              "A stand-in for the class of vLLM PR 26385 (a resumed request's recompute "
              "given the wrong input ids) and of the same fix in vLLM's hardware runners "
              "(vllm-gaudi 1243, tenstorrent/vllm 326: resumed requests classified as "
              "decode past their prompt); MRv2 keeps prompt_len and prefill_len apart for "
              "this, and no MRv2 PR of this line was found"),
        Fault("prefix-hit-slot-mapping", 36580, "wrong KV slots for a prefix-cache hit",
              "v2/input_batch.py prepare_inputs: the rows of requests admitted in the step "
              "are mapped to KV slots as if each began its prompt at 0, each token at its "
              "offset in the query. Exact for a fresh or resumed request (its first chunk "
              "begins at 0) and for a PD import (a decode row, left alone); a request "
              "admitted with a cached prefix writes its KV over the cached blocks, which "
              "other requests share, and leaves its own positions empty. A stand-in: the "
              "class of MRv2's slot-mapping bug fixed by PR 36580 (a query that starts "
              "mid-prompt mapped as if it began at 0), on the prefix-cache path; no MRv2 PR "
              "of this line was found"),
    )
}

KNOWN_FAULTS: dict[str, Fault] = {**FAULTS, **COVERAGE_FAULTS}


# Not a historic bug but a ruler for latency detection: `slow-step:PCT` adds busy work of
# PCT % of the step's measured time inside the forward phase (slow_step.py,
# v2/model_runner.py _forward). It is never part of the default catch matrix (`FAULTS`).
SLOW_STEP = "slow-step"
SLOW_STEP_MAX = 1000.0


def slow_step_pct(name: str) -> float | None:
    """PCT of a `slow-step:PCT` fault name; None for any other name. ValueError when the
    name is `slow-step` with a missing or out-of-range PCT."""
    if name != SLOW_STEP and not name.startswith(SLOW_STEP + ":"):
        return None
    try:
        pct = float(name.split(":", 1)[1])
    except (IndexError, ValueError):
        raise ValueError(f"{name!r}: write slow-step:PCT, e.g. slow-step:10") from None
    if not 0 < pct <= SLOW_STEP_MAX:
        raise ValueError(f"{name!r}: PCT must be in (0, {SLOW_STEP_MAX:g}]")
    return pct


class FaultSet:
    """The faults switched on for one runner instance (immutable)."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        names = tuple(names)
        self.slow_step_pct: float | None = None
        for n in names:
            try:
                pct = slow_step_pct(n)
            except ValueError as e:
                raise RunnerError(str(e)) from None
            if pct is not None:
                self.slow_step_pct = pct
        unknown = [n for n in names if n not in KNOWN_FAULTS and slow_step_pct(n) is None]
        if unknown:
            raise RunnerError(
                f"unknown fault {unknown[0]!r}; known faults: "
                f"{', '.join(sorted(KNOWN_FAULTS))}, {SLOW_STEP}:PCT")
        self.names = frozenset(n for n in names if n in KNOWN_FAULTS)

    def active(self, name: str) -> bool:
        # a typo at a call site must not silently disable a switch
        assert name in KNOWN_FAULTS, name
        return name in self.names

    def any(self) -> bool:
        """Any switch or ruler on."""
        return bool(self.names) or self.slow_step_pct is not None

    def __repr__(self) -> str:
        slow = [f"{SLOW_STEP}:{self.slow_step_pct:g}"] if self.slow_step_pct else []
        return f"FaultSet({sorted(self.names) + slow})"
