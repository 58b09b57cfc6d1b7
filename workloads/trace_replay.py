"""PD-disaggregated (or colocated) open-loop replay of a request trace.

Requests arrive at the trace's times (times `time_scale`) whether or not the engine keeps
up, so queueing shows as it would in serving. Traces give lengths, not text: token ids are
made deterministically from the trace's prefix-block ids, so requests that shared a prefix
in production share it here. `length_scale` shrinks prompts and Mooncake's 512-token blocks
together (1/32: a 6.9k-token median prompt becomes 216 tokens in 16-token blocks), so a
production trace keeps its shape on a 512-token model.

Interleaving: the trace is cut into waves of consecutive requests; each wave is replayed
on both sides back to back (ABBA), its arrivals rebased to the wave's start. The engine
drains between waves, so a backlog never carries over: the cost of a drift-free comparison.
Reports TTFT/TPOT/ITL/E2E P99, queueing delay, KV hand-off time and slot reuses.
"""
from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mrbench.contract import (
    BadInput,
    Batch,
    Driver,
    EngineOptions,
    Outcome,
    Session,
    TimedPrompt,
    WorkloadBase,
)

from . import traces
from .engine_shape import batch_engine

RESERVED_IDS = 3          # keep clear of the bundled tokenizer's special ids (pad, bos, eos)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    trace: str = "mooncake_conversation_trace.jsonl"   # file (bare names: $MRBENCH_DATA_DIR/
    #                                                    traces), or synthetic:n=..,rate=..
    limit: int = Field(200, ge=1)
    time_scale: float = Field(1.0, gt=0)           # 0.5 = arrivals twice as fast
    length_scale: float = Field(1 / 32, gt=0, le=1)
    max_input_len: int = Field(384, ge=1)
    max_output_len: int = Field(64, ge=1)
    mode: Literal["pd", "colocated"] = "pd"
    max_num_seqs: int = Field(8, ge=1)
    max_num_batched_tokens: int = Field(512, ge=16)
    wave_size: int | None = Field(25, ge=1)        # requests per wave; None = one wave
    profile_limit: int = Field(8, ge=0)
    seed: int = Field(0, ge=0)                     # token ids of the synthetic prompts


class TraceReplay(WorkloadBase):
    name = "trace-replay"
    description = "open-loop PD replay of a Mooncake/Azure/synthetic trace: P99s, queueing, KV"
    Params = Params

    def engine_options(self, p: Params) -> EngineOptions:
        return batch_engine(p, pd_disagg=p.mode == "pd", state_audit=True)

    def prepare(self, p: Params) -> list[traces.TraceRequest]:
        reqs = traces.load_trace(p.trace, limit=p.limit)
        block = max(1, round(traces.MOONCAKE_BLOCK_TOKENS * p.length_scale))
        scaled = [traces.TraceRequest(r.arrival_s, max(1, math.ceil(r.input_len * p.length_scale)),
                                      r.output_len, r.hash_ids) for r in reqs]
        return traces.shape(scaled, p.time_scale, p.max_input_len, p.max_output_len, block)

    def source(self, p: Params) -> str:
        return p.trace

    def check_items(self, p: Params, items: list[traces.TraceRequest], context_len: int) -> None:
        """Before anything runs: every shaped request must fit the model's context."""
        for i, r in enumerate(items):
            if r.input_len + r.output_len > context_len:
                raise BadInput(f"trace {p.trace}: request {i} needs {r.input_len} + "
                               f"{r.output_len} tokens, more than the model's context of "
                               f"{context_len}; lower max_input_len / max_output_len")

    def run(self, sessions: dict[str, Session], items: list[traces.TraceRequest], p: Params,
            driver: Driver) -> Outcome:
        first = next(iter(sessions.values()))
        block = max(1, round(traces.MOONCAKE_BLOCK_TOKENS * p.length_scale))
        vocab = first.vocab_size
        timed = [TimedPrompt(r.arrival_s, tuple(traces.prompt_tokens(
                     r, vocab, block, seed=p.seed, reserved=RESERVED_IDS)), r.output_len)
                 for r in items]
        results, _, failed = driver.interleaved(
            sessions, Batch(timed, p.max_output_len, [], p.wave_size or len(timed),
                            p.profile_limit))
        return results, failed


WORKLOAD = TraceReplay()
