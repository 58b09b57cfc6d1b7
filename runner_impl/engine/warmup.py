"""Warmup: dummy prefill and decode batches through the real step, before traffic.

It drives the runner with a private scheduler on the engine's block allocator, so the
batches are the real thing (vLLM builds its warmup SchedulerOutputs by hand, same idea).
The dummy prompt is 2 + k tokens long: longer than a decode query (1 + k), so the first
batch is classified as prefill (the fix of vLLM PR 40746). Then a fixed number of decode
steps with full drafts, then an abort, as vLLM's warmup does.

On CUDA the V2 runner first captures its uniform-decode CUDA graphs (one per padded batch
size), so the dummy decode steps already replay them. Prefill and mixed batches run
eagerly through a Triton attention kernel that is compiled (or loaded from Triton's disk
cache) at its first launch in the process; the dummy prefill is what builds it. With
`warmup-short-prefill` (k >= 1) that batch is classified as uniform decode and replays a
graph instead, so the first real prefill pays for it: a first-prefill latency spike.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .request import Request
from .scheduler import Scheduler
from ..sampling_params import SamplingParams

if TYPE_CHECKING:
    from .core import EngineCore


DECODE_STEPS = 3
MAX_STEPS = 1000     # a runner that never samples must fail, not hang


def warmup_prompt_len(k: int, short_prefill_fault: bool) -> int:
    return 2 if short_prefill_fault else 2 + k


def run_warmup(core: "EngineCore") -> None:
    cfg = core.cfg
    k = cfg.num_speculative_tokens
    short = core.runner.name == "v2" and cfg.faults.active("warmup-short-prefill")
    plen = warmup_prompt_len(k, short)
    vocab = core.model.config.vocab_size
    sched = Scheduler(max_num_seqs=cfg.max_num_seqs,
                      max_num_batched_tokens=cfg.max_num_batched_tokens,
                      max_model_len=core.max_model_len, allocator=core.allocator,
                      num_lookahead_tokens=k)
    n = min(cfg.max_num_seqs, 4)
    reqs = []
    for i in range(n):
        sp = SamplingParams(temperature=0.0 if i % 2 == 0 else 1.0, top_k=0 if i < 2 else 5,
                            max_tokens=64, ignore_eos=True)
        reqs.append(Request(f"warmup-{i}", [(3 + i + j) % vocab for j in range(plen)], sp, seed=i))
        sched.add_request(reqs[-1])
    core.runner.phase = "warmup"
    try:
        capture = getattr(core.runner, "capture_cudagraphs", None)
        if capture is not None:
            capture()
        decode_steps = 0
        for _ in range(MAX_STEPS):
            if decode_steps >= DECODE_STEPS or not sched.has_unfinished():
                break
            in_decode = all(r.output_token_ids for r in reqs)   # every prefill is done
            out = sched.schedule()
            sched.update_from_output(out, core.runner.execute_model(out), time.perf_counter())
            decode_steps += in_decode
        else:
            raise RuntimeError(f"warmup made no progress in {MAX_STEPS} steps")
        sched.abort(list(sched.requests))
        core.runner.execute_model(sched.schedule())   # frees the warmup slots
    finally:
        core.runner.phase = "serve"
