"""The messages between scheduler and model runner, shaped like vLLM's V1 interfaces."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..sampling_params import SamplingParams

if TYPE_CHECKING:
    from ..logprobs import TokenLogprobs


@dataclass
class NewRequestData:
    """A request the runner has not seen (new, resumed after preemption, or PD-imported)."""
    req_id: str
    prompt_token_ids: list[int]
    all_token_ids: list[int]     # prompt + outputs so far (resumed / PD-imported requests)
    prefill_len: int             # tokens handed to the runner as prefill (>= prompt_len)
    num_computed_tokens: int     # > 0 when KV arrived from elsewhere (PD decode side)
    block_ids: list[int]
    sampling_params: SamplingParams
    seed: int                    # resolved per-request seed


@dataclass
class CachedRequestData:
    """Requests the runner already holds: the scheduler's truth about their progress."""
    req_ids: list[str] = field(default_factory=list)
    num_computed_tokens: list[int] = field(default_factory=list)
    new_block_ids: list[list[int]] = field(default_factory=list)


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: list[NewRequestData]
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: dict[str, int]               # req_id -> query tokens this step
    total_num_scheduled_tokens: int
    scheduled_spec_decode_tokens: dict[str, list[int]]  # req_id -> drafts (-1 = on-device)
    finished_req_ids: set[str]                         # finished since the last step
    preempted_req_ids: set[str] = field(default_factory=set)
    samples_req_ids: set[str] = field(default_factory=set)  # rows that sample a token (not a partial prefill chunk)

    @property
    def req_ids(self) -> list[str]:
        """Batch order: new requests first, then cached ones (as scheduled)."""
        return [r.req_id for r in self.scheduled_new_reqs] + list(self.scheduled_cached_reqs.req_ids)


@dataclass
class ModelRunnerOutput:
    req_ids: list[str]
    sampled_token_ids: list[list[int]]   # per request: accepted drafts + 1 (empty: partial prefill)
    draft_token_ids: list[list[int]]     # per request: drafts for the next step (-1 = on-device)
    dispatch_key: tuple = ()             # how the step was classified (see v2/dispatch.py)
    # per request: the logprobs of each sampled token (None: it asked for none); None when
    # no request of the step asked
    logprobs: list[list[TokenLogprobs] | None] | None = None
