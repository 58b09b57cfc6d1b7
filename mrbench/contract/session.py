"""The engine session: what a workload may ask of an engine, and nothing more.

A target (bundled runner, vLLM) opens one `Session` per side of a comparison. Workloads drive
sessions only through this interface, so one workload runs unchanged on every target.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, NoReturn, Protocol


class FrozenArgs(dict):
    """Engine arguments by the engine's own names (vLLM's `EngineArgs`), read-only.

    A dict, so that it is JSON and a manifest's `asdict` as it stands; hashable (by its
    canonical JSON), so that the frozen dataclasses holding it (`EngineOptions`, a side)
    stay hashable even where a value is itself a mapping."""

    def __hash__(self) -> int:                  # type: ignore[override]
        return hash(json.dumps(self, sort_keys=True, default=str))

    def _read_only(self, *a: Any, **k: Any) -> NoReturn:
        raise TypeError("engine arguments are read-only (build a new FrozenArgs)")

    __setitem__ = __delitem__ = __ior__ = _read_only          # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _read_only  # type: ignore[assignment]

    def __reduce__(self) -> tuple:
        return (FrozenArgs, (dict(self),))      # pickled to engine processes

    def __repr__(self) -> str:
        return f"FrozenArgs({dict.__repr__(self)})"


@dataclass(frozen=True)
class EngineOptions:
    """Engine shape a workload asks for (what a vLLM user would pass to `LLM`)."""

    max_num_seqs: int = 16
    max_num_batched_tokens: int = 2048
    num_speculative_tokens: int = 0
    speculative_method: str = "ngram"
    draft_model: str | None = None       # method "draft": None = the side's own model drafts
    pd_disagg: bool = False
    dtype: str = "auto"
    state_audit: bool = False            # bundled only: poison freed slots, audit each step
    # The KV cache, by vLLM's names where vLLM has one. None: the engine's own sizing (the
    # bundled engine: every slot at the full context; vLLM: its memory share) and block size
    # (bundled 16; vLLM's per-device default).
    num_kv_blocks: int | None = None     # vLLM: num_gpu_blocks_override
    block_size: int | None = None
    enable_prefix_caching: bool = False  # off unless a workload asks (vLLM's own default is on)
    gpu_memory_share: float | None = None   # fraction of the GPU this engine may take (set by
                                            # the orchestrator: every resident engine shares it)
    engine_args: FrozenArgs = FrozenArgs()  # the suite's `engine_args` for this entry (set by
                                            # the orchestrator, never by a workload)
    logprobs_mode: str = "raw_logprobs"  # what logprobs are of (vLLM's engine option):
                                         # raw_logprobs or processed_logprobs


@dataclass
class TokenLogprob:
    """One generated token's logprobs as the engine returned them (vLLM's `Logprob` dict
    of the position): the token's own logprob and rank, and the top-N of the position."""

    logprob: float
    rank: int                            # 1 = the most likely token
    top: list[tuple[int, float]]         # (token id, logprob), most likely first


@dataclass
class Completion:
    """One finished request, engine-neutral; times are host perf_counter seconds."""

    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    arrival_time: float
    token_times: list[float]
    finish_reason: str | None = None
    kv_handoff_s: float | None = None
    first_scheduled_time: float | None = None   # queueing delay = this - arrival_time
    num_drafts: int | None = None               # spec decode (None: the engine had none)
    num_draft_tokens: int | None = None
    num_accepted_tokens: int | None = None
    accepted_per_pos: list[int] | None = None   # [i]: verification steps accepting draft i
    prefill_done_time: float | None = None      # PD: the prefill instance finished (its
                                                # part of TTFT = this - arrival_time)
    logprobs: list[TokenLogprob] | None = None  # [i]: output token i's (None: not asked)
    kv_bytes: int | None = None                 # PD through NIXL: the KV bytes it pulled
    kv_arrived: bool | None = None              # PD through NIXL: its KV was read, none failed


@dataclass(frozen=True)
class Sampling:
    """Sampling for a batch of prompts (vLLM's SamplingParams fields); a batch without one
    is greedy. Every field but the seeds holds for each prompt; the fields past `seeds`
    default to off.

    One seed per prompt, so every request's stream is reproducible and two runners that
    share a sampler must produce the same tokens for the same seed. A seed of None leaves
    the prompt unseeded (the engine picks its randomness): its stream is promised nothing,
    so token-for-token checks skip it."""

    temperature: float                   # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0                       # 0 = off
    seeds: tuple[int | None, ...] = ()   # [i]: prompt i's seed; None = unseeded
    min_p: float = 0.0                   # 0 = off
    repetition_penalty: float = 1.0      # 1 = off; prompt and output tokens
    frequency_penalty: float = 0.0       # 0 = off; output tokens
    presence_penalty: float = 0.0        # 0 = off; output tokens
    logit_bias: tuple[tuple[int, float], ...] = ()   # (token id, bias) pairs; () = none

    def window(self, lo: int, hi: int) -> "Sampling":
        """The same sampling for prompts [lo, hi) of the batch."""
        return replace(self, seeds=self.seeds[lo:hi])

    def engine_kwargs(self) -> dict[str, Any]:
        """Every field but the seeds, as keyword arguments of vLLM's `SamplingParams` (the
        bundled runner's takes the same): the one mapping each target uses."""
        kw: dict[str, Any] = dict(
            temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
            min_p=self.min_p, repetition_penalty=self.repetition_penalty,
            frequency_penalty=self.frequency_penalty, presence_penalty=self.presence_penalty)
        if self.logit_bias:
            kw["logit_bias"] = dict(self.logit_bias)
        return kw


@dataclass(frozen=True)
class TimedPrompt:
    """One request of an open-loop replay: it arrives at `arrival_s` after the start."""

    arrival_s: float
    prompt_token_ids: tuple[int, ...]
    max_tokens: int


@dataclass
class Step:
    """One engine step as the target saw it."""

    instance: str                        # "colocated" | "prefill" | "decode"
    index: int
    t_start: float
    t_end: float
    num_reqs: int
    num_tokens: int
    kind: str                            # dispatch class, e.g. "uniform_decode" / "mixed"
    # The stepping thread's clock over the step, where the target can read it (None
    # otherwise): CPU time, and the context switches the OS forced (involuntary) and the
    # thread made (voluntary). Wall time minus CPU time is time off the CPU; with
    # involuntary switches, something else had the CPU (docs/detection-power.md, "Bursts").
    cpu_ms: float | None = None
    invol_switches: int | None = None
    vol_switches: int | None = None
    # The slow-step ruler's own busy time in the step (None: no ruler, or a step it did
    # not see): what the ruler added, to set beside what the step moved
    ruler_ms: float | None = None


@dataclass
class AuditSample:
    """State audit of one step (targets that can see their runner's state)."""

    instance: str
    step: int
    max_slack: int                       # max over live requests of mirror - truth
    min_slack: int
    allowed_slack: int                   # the mirror may exceed the truth by at most this


class Session(Protocol):
    vocab_size: int                      # token ids a TimedPrompt may use: [0, vocab_size)
    step_label: str                      # profiler range around one step
    auditing: bool                       # state audits on (only outside timed passes)
    phase_labels: dict[str, str]         # phase name -> profiler range name

    def generate(self, prompts: list[str], max_tokens: int, stop: list[str],
                 sampling: Sampling | None = None,
                 logprobs: int | None = None) -> list[Completion]:
        """Completions in prompt order: greedy, or sampled with one seed per prompt; with
        `logprobs` = N, each generated token's logprob, rank and top-N."""

    def serve(self, requests: list[TimedPrompt]) -> list[Completion]:
        """Open loop: each request is added at its arrival time whether or not the engine
        keeps up; greedy, exactly `max_tokens` each (EOS ignored). In request order."""

    def dispatch_log(self) -> list[tuple[str, str]]:
        """(phase, dispatch class) of every step since the session opened, warmup included
        ("warmup" / "serve"); the classes are the target's own (V2: uniform_decode/mixed)."""

    def counters(self) -> dict[str, float]:
        """Target-specific totals since the last reset (e.g. slot reuses); may be empty."""

    def fits(self, prompt: str, max_tokens: int) -> bool:
        """Whether the model's context can take the prompt (the engine would reject it)."""

    def steps(self) -> list[Step]:
        """Steps since the last `reset_steps`."""

    def reset_steps(self) -> None: ...

    def audits(self) -> list[AuditSample]:
        """State-audit samples since the last reset (empty if unsupported)."""

    def resolved(self) -> dict[str, Any]:
        """What actually ran (runner, device, dtype, model path, engine config) for the manifest.
        `sampler` names the code that draws sampled tokens: two sides with the same sampler
        promise the same stream for the same seed."""

    def close(self) -> None: ...
