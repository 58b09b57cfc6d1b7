"""LLM: vLLM's offline API over one engine instance, or two (PD disaggregation).

`LLM(...).generate(prompts, SamplingParams(...))` for batch use; `add_request` / `step` /
`has_unfinished` for open-loop drivers (trace replay) that control arrivals.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from .config import EngineConfig
from .default_model import default_model_dir
from .engine.core import EngineCore, StepRecord
from .engine.kv_transfer import KVTransport, TensorCopyTransport
from .engine.request import Request, RequestStatus
from .errors import RunnerError
from .logprobs import TokenLogprobs
from .model.loader import load_model, load_tokenizer
from .sampling_params import SamplingParams
from .v1.model_runner import ModelRunnerV1
from .v2.model_runner import ModelRunnerV2
from .v2.sampler import MAX_LOGIT_BIAS_TOKENS

Prompt = str | Sequence[int] | dict


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    stop_reason: str | int | None = None
    logprobs: list[TokenLogprobs] | None = None   # [i]: token i's (requests that asked)


@dataclass
class RequestMetrics:
    arrival_time: float
    first_scheduled_time: float | None
    first_token_time: float | None
    finished_time: float | None
    token_times: list[float]              # host time each output token became available
    num_preemptions: int = 0
    num_drafts: int = 0                   # verification steps with >= 1 draft
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = dataclasses.field(default_factory=list)  # vLLM's per-position count
    kv_handoff_s: float | None = None     # PD: time spent moving this request's KV


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics
    prompt: str | None = None

    @property
    def token_ids(self) -> list[int]:
        return self.outputs[0].token_ids

    @property
    def text(self) -> str:
        return self.outputs[0].text

    @property
    def token_times(self) -> list[float]:
        return self.metrics.token_times


class LLM:
    def __init__(self, model: str | Path | None = None, runner: str = "v2",
                 device: str = "cpu", *, transport: KVTransport | None = None,
                 **kwargs: Any) -> None:
        known = {f.name for f in dataclasses.fields(EngineConfig)}
        bad = sorted(set(kwargs) - known)
        if bad:
            raise RunnerError(f"unknown LLM argument {bad[0]!r}")
        self.config = cfg = EngineConfig(model=None if model is None else str(model),
                                         runner=runner, device=device, **kwargs)
        if cfg.faults.any() and cfg.runner != "v2":
            raise RunnerError("fault switches exist only in the v2 runner "
                              f"(got faults={sorted(cfg.faults.names)} with runner={runner!r})")
        self.model_dir = Path(cfg.model) if cfg.model else default_model_dir()
        torch.manual_seed(cfg.seed)
        self.model, self.model_config = load_model(self.model_dir, cfg.torch_dtype,
                                                   cfg.torch_device)
        self.tokenizer = load_tokenizer(self.model_dir)
        max_pos = self.model_config.max_position_embeddings
        self.max_model_len = cfg.max_model_len or max_pos
        if self.max_model_len > max_pos:
            raise RunnerError(f"max_model_len {self.max_model_len} exceeds the model's "
                              f"max_position_embeddings {max_pos}")
        draft = None
        if cfg.num_speculative_tokens and cfg.speculative_method == "draft":
            draft, dcfg = load_model(cfg.draft_model, cfg.torch_dtype, cfg.torch_device)
            if dcfg.vocab_size != self.model_config.vocab_size:
                raise RunnerError(f"draft model vocab {dcfg.vocab_size} != target vocab "
                                  f"{self.model_config.vocab_size}")
        self.eos_token_ids = tuple(self.tokenizer.eos_token_ids or self.model_config.eos_token_ids)
        runner_cls = ModelRunnerV2 if cfg.runner == "v2" else ModelRunnerV1
        mk = lambda name: EngineCore(cfg, self.model, draft, self.max_model_len, name,  # noqa: E731
                                     runner_cls, self._check_stop_strings, self._receive_kv)
        self.cores = [mk("prefill"), mk("decode")] if cfg.pd_disagg else [mk("colocated")]
        self.transport = transport or TensorCopyTransport()
        self._requests: dict[str, Request] = {}
        self._counter = 0
        self._idle_steps = 0
        if cfg.warmup:
            for core in self.cores:
                core.warmup()

    # ---- engine-level API ------------------------------------------------------------
    @property
    def step_records(self) -> list[StepRecord]:
        return [r for core in self.cores for r in core.step_records]

    def add_step_callback(self, fn: Callable) -> None:
        """fn(core, scheduler_output, runner_output) after every step of every instance."""
        for core in self.cores:
            core.step_callbacks.append(fn)

    def _tokenize(self, prompt: Prompt) -> tuple[list[int], str | None]:
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt), prompt
        if isinstance(prompt, dict):
            if "prompt_token_ids" in prompt:
                return list(prompt["prompt_token_ids"]), prompt.get("prompt")
            if "prompt" in prompt:
                return self.tokenizer.encode(prompt["prompt"]), prompt["prompt"]
            raise RunnerError("a dict prompt needs 'prompt' or 'prompt_token_ids'")
        return [int(t) for t in prompt], None

    def add_request(self, prompt: Prompt, params: SamplingParams,
                    arrival_time: float | None = None) -> str:
        ids, text = self._tokenize(prompt)
        V = self.model_config.vocab_size
        if not ids:
            raise RunnerError("empty prompt")
        if len(ids) >= self.max_model_len:
            raise RunnerError(f"prompt has {len(ids)} tokens; max_model_len is "
                              f"{self.max_model_len} (room for >= 1 output token needed)")
        if min(ids) < 0 or max(ids) >= V:
            raise RunnerError(f"prompt token id out of range [0, {V})")
        if params.logit_bias and max(params.logit_bias) >= V:
            raise RunnerError(f"logit_bias token id {max(params.logit_bias)} out of range "
                              f"[0, {V})")
        if self.config.runner == "v2" and len(params.logit_bias or ()) > MAX_LOGIT_BIAS_TOKENS:
            raise RunnerError(f"logit_bias has {len(params.logit_bias)} tokens; the v2 runner "
                              f"holds {MAX_LOGIT_BIAS_TOKENS} a request (as MRv2)")
        if self.config.num_speculative_tokens and (params.min_p or params.processes_raw_logits):
            # verification would have to apply them at every draft position (penalties
            # counting the drafts before it); the bundled runner does not
            raise RunnerError("min_p, penalties and logit_bias are not implemented with "
                              "speculative decoding in the bundled runner")
        if params.logprobs is not None and params.logprobs > V:
            raise RunnerError(f"SamplingParams.logprobs {params.logprobs} exceeds the "
                              f"vocabulary ({V} tokens)")
        alloc = self.cores[-1].allocator
        need = len(ids) + 1 + self.config.num_speculative_tokens
        if need > alloc.num_blocks * alloc.block_size:
            raise RunnerError(f"prompt of {len(ids)} tokens cannot fit in the KV cache "
                              f"({alloc.num_blocks} blocks of {alloc.block_size}); "
                              "raise num_kv_blocks")
        req_id = str(self._counter)
        seed = params.seed if params.seed is not None else \
            (self.config.seed * 1_000_003 + self._counter) % (2 ** 31)
        self._counter += 1
        req = Request(req_id, ids, params, seed, self.eos_token_ids,
                      arrival_time if arrival_time is not None else time.perf_counter(),
                      prompt_text=text)
        self._requests[req_id] = req
        if self.config.pd_disagg:
            pre = Request(req_id, ids, dataclasses.replace(params, max_tokens=1), seed,
                          self.eos_token_ids, req.arrival_time, pd_origin=req)
            self.cores[0].scheduler.add_request(pre)
        else:
            self.cores[0].scheduler.add_request(req)
        return req_id

    def has_unfinished(self) -> bool:
        return any(c.scheduler.has_unfinished() or c.has_in_flight for c in self.cores)

    def step(self) -> list[RequestOutput]:
        """One step of every instance; returns the requests that finished."""
        steps_before = [len(c.step_records) for c in self.cores]
        if not self.config.pd_disagg:
            done = [self._output(r) for r in self.cores[0].step()]
        else:
            prefill, decode = self.cores
            done = []
            if prefill.scheduler.has_unfinished():
                for pre in prefill.step():
                    done += self._hand_off(prefill, decode, pre)
            if decode.scheduler.has_unfinished():
                done += [self._output(r) for r in decode.step()]
        self._check_progress(steps_before)
        return done

    def _check_progress(self, steps_before: list[int]) -> None:
        """A scheduler that can run nothing, step after step, is stuck: fail, don't spin."""
        ran = any(r.num_tokens for c, n in zip(self.cores, steps_before)
                  for r in c.step_records[n:])
        self._idle_steps = 0 if ran else self._idle_steps + 1
        if self._idle_steps >= 100 and self.has_unfinished():
            raise RuntimeError("engine made no progress in 100 steps: " + "; ".join(
                self._stall(c) for c in self.cores
                if c.scheduler.has_unfinished() or c.has_in_flight))

    @staticmethod
    def _stall(core: EngineCore) -> str:
        """Why `core` schedules nothing, from its scheduler and block pool now: "KV blocks
        exhausted" only where the first waiting request's blocks are really not there, and
        what is known otherwise (the hint a report gives follows these words)."""
        sched, alloc = core.scheduler, core.allocator
        queue = (f"{len(sched.waiting)} waiting, {len(sched.running)} running, "
                 f"{alloc.num_free} of {alloc.num_blocks} KV blocks free")
        short = sched.kv_shortfall()
        if short is not None:
            need, usable = short
            return (f"KV blocks exhausted on the {core.name} instance: its first waiting "
                    f"request needs {need} blocks, {usable} can be taken ({queue}); raise "
                    "num_kv_blocks")
        return (f"no request scheduled on the {core.name} instance, with KV blocks to "
                f"spare ({queue}): not a KV shortage")

    # ---- PD disaggregation -----------------------------------------------------------
    def _hand_off(self, prefill: EngineCore, decode: EngineCore,
                  pre: Request) -> list[RequestOutput]:
        """Prefill finished (first token sampled): either the request is complete, or its
        KV leaves the prefill instance now, before any later step can reuse the blocks,
        and waits with the request until the decode instance admits it."""
        req: Request = pre.pd_origin
        req.output_token_ids = list(pre.output_token_ids)
        req.output_logprobs = list(pre.output_logprobs)
        req.token_times = list(pre.token_times)
        req.first_scheduled_time = pre.first_scheduled_time
        req.text = pre.text
        req.status, req.stop_reason = pre.status, pre.stop_reason
        stopped_by_length = pre.status == RequestStatus.FINISHED_LENGTH and \
            req.sampling_params.max_tokens > 1 and req.num_tokens < self.max_model_len
        if not stopped_by_length:
            return [self._output(req)]
        req.status = RequestStatus.WAITING
        t0 = time.perf_counter()
        req.kv_payload = self.transport.send(req.req_id, prefill.all_kv_caches(),
                                             pre.block_ids, req.prompt_len)
        req.kv_handoff_s = time.perf_counter() - t0
        req.num_computed_tokens = req.prompt_len        # the KV travels: skip the prefill
        decode.scheduler.add_request(req)
        return []

    def _receive_kv(self, req: Request) -> None:
        """Decode side, on admission: blocks were just allocated; load the KV into them."""
        decode = self.cores[-1]
        t0 = time.perf_counter()
        self.transport.recv(req.kv_payload, decode.all_kv_caches(), req.block_ids)
        req.kv_handoff_s = (req.kv_handoff_s or 0.0) + time.perf_counter() - t0

    # ---- outputs ---------------------------------------------------------------------
    def _check_stop_strings(self, req: Request) -> None:
        stops = req.sampling_params.stop
        if not stops:
            return
        text = self.tokenizer.decode(req.output_token_ids)
        hits = [(text.find(s), s) for s in stops if s in text]
        if hits:
            at, s = min(hits)
            req.text = text[:at]
            req.status, req.stop_reason = RequestStatus.FINISHED_STOPPED, s

    def _output(self, req: Request) -> RequestOutput:
        req = self._requests.get(req.req_id, req)
        text = req.text if isinstance(req.stop_reason, str) else \
            self.tokenizer.decode(req.output_token_ids)
        times = req.token_times
        return RequestOutput(
            request_id=req.req_id, prompt_token_ids=req.prompt_token_ids,
            outputs=[CompletionOutput(0, text, list(req.output_token_ids),
                                      req.status.value if req.status.finished else None,
                                      req.stop_reason,
                                      None if req.sampling_params.logprobs is None
                                      else list(req.output_logprobs))],
            finished=req.status.finished,
            metrics=RequestMetrics(
                arrival_time=req.arrival_time, first_scheduled_time=req.first_scheduled_time,
                first_token_time=times[0] if times else None,
                finished_time=times[-1] if times else None, token_times=list(times),
                num_preemptions=req.num_preemptions, num_drafts=req.num_drafts,
                num_draft_tokens=req.num_draft_tokens,
                num_accepted_tokens=req.num_accepted_tokens,
                accepted_per_pos=list(req.accepted_per_pos),
                kv_handoff_s=req.kv_handoff_s),
            prompt=req.prompt_text)

    def generate(self, prompts: Prompt | Sequence[Prompt],
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None
                 ) -> list[RequestOutput]:
        """Run prompts to completion; one output per prompt, in order."""
        if isinstance(prompts, (str, dict)) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        sampling_params = sampling_params or SamplingParams()
        sps = sampling_params if isinstance(sampling_params, Sequence) \
            else [sampling_params] * len(prompts)
        if len(sps) != len(prompts):
            raise RunnerError(f"{len(prompts)} prompts but {len(sps)} SamplingParams")
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, sps)]
        done: dict[str, RequestOutput] = {}
        while self.has_unfinished():
            for out in self.step():
                done[out.request_id] = out
        return [done[i] for i in ids]
