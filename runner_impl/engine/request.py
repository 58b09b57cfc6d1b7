"""One request's scheduler-side life: tokens, progress, KV blocks, timestamps."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..sampling_params import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"

    @property
    def finished(self) -> bool:
        return self is RequestStatus.FINISHED_STOPPED or self is RequestStatus.FINISHED_LENGTH


@dataclass
class Request:
    req_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    seed: int
    eos_token_ids: tuple[int, ...] = ()
    arrival_time: float = 0.0
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0           # tokens whose KV is in this instance's cache
    # Async scheduling: scheduled in steps whose output has not come back yet. Both are 0
    # whenever the scheduler is called with no step in flight (synchronous engines).
    num_inflight_tokens: int = 0           # query tokens of those steps
    num_output_placeholders: int = 0       # tokens those steps will sample (not known yet)
    prefill_len: int = 0                   # set when (re)admitted to the runner
    spec_token_ids: list[int] = field(default_factory=list)  # drafts for the next step
    block_ids: list[int] = field(default_factory=list)
    # Prefix caching: the hash chain of the request's full blocks (prompt and outputs, as
    # far as they are known), and how many of its blocks are registered in the cache.
    block_hashes: list[bytes] = field(default_factory=list)
    num_cached_blocks: int = 0
    status: RequestStatus = RequestStatus.WAITING
    num_preemptions: int = 0
    token_times: list[float] = field(default_factory=list)  # host time each output token arrived
    first_scheduled_time: float | None = None
    text: str = ""
    stop_reason: str | int | None = None
    # Spec-decode accounting (what vLLM's spec_decode counters report).
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)  # [i]: steps accepting draft i
    output_logprobs: list = field(default_factory=list)  # [i]: output token i's TokenLogprobs
                                                         # (requests that asked for logprobs)
    prompt_text: str | None = None
    pd_origin: "Request | None" = None     # PD: the user's request a prefill-side copy serves
    kv_payload: object = None              # PD: KV from the prefill side, loaded on admission
    kv_handoff_s: float | None = None      # PD: time spent sending + receiving that KV

    def __post_init__(self) -> None:
        if not self.prefill_len:
            self.prefill_len = len(self.prompt_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)
