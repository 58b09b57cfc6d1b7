"""EngineCore: one instance = scheduler + KV cache + model runner, stepped by the LLM."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..config import EngineConfig
from ..errors import RunnerError
from ..memory import available_bytes, size_text
from ..model.llama import LlamaForCausalLM, allocate_kv_cache, kv_cache_bytes
from ..thread_clock import ThreadClock, thread_clock
from .block_manager import BlockAllocator, cdiv
from .outputs import ModelRunnerOutput, SchedulerOutput
from .request import Request
from .scheduler import Scheduler
from .warmup import run_warmup


@dataclass
class StepRecord:
    instance: str           # "colocated" | "prefill" | "decode"
    step: int
    t_start: float          # perf_counter seconds
    t_end: float
    num_reqs: int
    num_tokens: int
    num_new_reqs: int
    dispatch_key: tuple
    # The stepping thread's own clock over the step (thread_clock()); None under async
    # scheduling, where a step's record spans other steps' host work.
    cpu_ms: float | None = None          # CPU time the thread spent in the step
    invol_switches: int | None = None    # times the OS took the CPU from it (preempted)
    vol_switches: int | None = None      # times it gave the CPU up (waited: device, lock, GIL)
    # The slow-step ruler's busy time in this step (its own account; None without the
    # ruler or for a step it did not see), so a study can tell what the ruler added from
    # what the step moved
    ruler_ms: float | None = None


def _check_kv_fits(cfg: EngineConfig, model: LlamaForCausalLM,
                   draft_model: LlamaForCausalLM | None, num_blocks: int) -> None:
    """Refuse, in one line, a KV cache larger than the memory free on the engine's device,
    before its block tables or tensors are made (runner_impl.memory says why)."""
    bs, dt = cfg.block_size, cfg.torch_dtype
    need = kv_cache_bytes(model.config, num_blocks + cfg.use_cuda_graphs, bs, dt)
    if draft_model is not None:
        need += kv_cache_bytes(draft_model.config, num_blocks, bs, dt)
    free = available_bytes(cfg.torch_device)
    if free is not None and need > free:
        sized = ("num_kv_blocks" if cfg.num_kv_blocks else
                 f"max_num_seqs {cfg.max_num_seqs} (the cache holds that many requests at "
                 f"full length)")
        raise RunnerError(f"KV cache of {num_blocks} blocks x {bs} tokens needs "
                          f"{size_text(need)} but {size_text(free)} of {cfg.torch_device.type} "
                          f"memory is available: lower {sized}")


class EngineCore:
    def __init__(self, cfg: EngineConfig, model: LlamaForCausalLM,
                 draft_model: LlamaForCausalLM | None, max_model_len: int, name: str,
                 runner_cls: Callable[..., Any],
                 stop_checker: Callable[[Request], None] | None = None,
                 on_admit: Callable[[Request], None] | None = None) -> None:
        # runner_cls: the model runner class (V1 or V2), chosen by the caller, so the engine
        # layer never imports the runners that consume its scheduler types.
        self.cfg, self.model, self.name, self.max_model_len = cfg, model, name, max_model_len
        k, bs = cfg.num_speculative_tokens, cfg.block_size
        self.max_blocks_per_req = cdiv(max_model_len + k, bs)
        num_blocks = cfg.num_kv_blocks or cfg.max_num_seqs * self.max_blocks_per_req
        dev, dt = cfg.torch_device, cfg.torch_dtype
        _check_kv_fits(cfg, model, draft_model, num_blocks)
        self.allocator = BlockAllocator(num_blocks, bs, cfg.enable_prefix_caching)
        # CUDA graphs pad decode batches; the padding rows write into one extra block that
        # the allocator never hands out.
        self.kv_caches = allocate_kv_cache(model.config, num_blocks + cfg.use_cuda_graphs, bs,
                                           dt, dev)
        draft = None
        if draft_model is not None:
            self.draft_kv_caches = allocate_kv_cache(draft_model.config, num_blocks, bs, dt, dev)
            draft = (draft_model, self.draft_kv_caches)
        else:
            self.draft_kv_caches = []
        self.runner = runner_cls(cfg, model, self.kv_caches, max_model_len,
                                 self.max_blocks_per_req, draft)
        self.scheduler = Scheduler(
            max_num_seqs=cfg.max_num_seqs, max_num_batched_tokens=cfg.max_num_batched_tokens,
            max_model_len=max_model_len, allocator=self.allocator, num_lookahead_tokens=k,
            stop_checker=stop_checker, on_admit=on_admit)
        self.step_records: list[StepRecord] = []
        # Async scheduling: the step queued on the device whose output is not yet read
        # (schedule time, its SchedulerOutput, its AsyncOutput).
        self._in_flight: tuple | None = None
        self.step_callbacks: list[Callable[["EngineCore", SchedulerOutput, ModelRunnerOutput], None]] = []
        ruler = getattr(self.runner, "slow_step", None)
        if ruler is not None:        # the slow-step ruler is a share of the step measured here
            def feed_ruler(core: "EngineCore", sched: SchedulerOutput,
                           out: ModelRunnerOutput) -> None:
                rec = core.step_records[-1]
                rec.ruler_ms = ruler.observe_step((rec.t_end - rec.t_start) * 1e3,
                                                  rec.dispatch_key)
            self.step_callbacks.append(feed_ruler)

    def warmup(self) -> None:
        run_warmup(self)

    @property
    def has_in_flight(self) -> bool:
        return self._in_flight is not None

    def step(self) -> list[Request]:
        """One scheduler step; returns the requests that finished in it (with async
        scheduling: in the step before it, whose output this one waits for)."""
        if self.cfg.async_scheduling:
            return self._step_async()
        clock0 = thread_clock()
        t0 = time.perf_counter()
        sched = self.scheduler.schedule(now=t0)
        out = self.runner.execute_model(sched)
        return self._complete(t0, sched, out, clock0)

    def _step_async(self) -> list[Request]:
        """Schedule and queue step n+1, then wait for step n and process its output, so
        the host's scheduling and input preparation overlap the device's step n."""
        t0 = time.perf_counter()
        sched = self.scheduler.schedule(now=t0)
        queued = (t0, sched, self.runner.execute_model_async(sched))
        prev, self._in_flight = self._in_flight, queued
        finished = []
        if prev is not None:
            finished = self._complete(prev[0], prev[1], prev[2].get())
        if not sched.total_num_scheduled_tokens:     # nothing to overlap: finish it now
            self._in_flight = None
            finished += self._complete(t0, sched, queued[2].get())
        return finished

    def _complete(self, t0: float, sched: SchedulerOutput, out: ModelRunnerOutput,
                  clock0: ThreadClock | None = None) -> list[Request]:
        t1 = time.perf_counter()
        clock1 = thread_clock() if clock0 is not None else None
        finished = self.scheduler.update_from_output(sched, out, t1)
        rec = StepRecord(
            self.name, len(self.step_records), t0, t1, len(out.req_ids),
            sched.total_num_scheduled_tokens, len(sched.scheduled_new_reqs), out.dispatch_key)
        if clock1 is not None:
            rec.cpu_ms, rec.invol_switches, rec.vol_switches = clock1.since(clock0)
        self.step_records.append(rec)
        for cb in self.step_callbacks:
            cb(self, sched, out)
        return finished

    def all_kv_caches(self) -> list[torch.Tensor]:
        return self.kv_caches + self.draft_kv_caches
