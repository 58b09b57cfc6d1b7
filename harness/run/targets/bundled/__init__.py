"""The bundled target: runner_impl in this process (V2 MRv2-style, or the V1 reference).

This package is the harness's one door to the bundled runner (import-linter's
`runner-behind-bundled` contract): beside the target, the runner as an lm-eval model
(`lm_eval.py`) and the pieces other targets and commands borrow (`runner_parts.py`).
"""
from __future__ import annotations

import time
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

from mrbench.contract import (
    AuditSample,
    BadInput,
    Completion,
    EngineOptions,
    Sampling,
    Step,
    TimedPrompt,
    TokenLogprob,
)
from mrbench.runner_impl import (
    COVERAGE_FAULTS,
    FAULTS,
    KNOWN_FAULTS,
    LLM,
    RunnerError,
    SamplingParams,
)
from mrbench.runner_impl.default_model import default_model_dir
from mrbench.runner_impl.model.loader import check_weights, load_config, load_tokenizer
from mrbench.runner_impl.model.random_presets import is_random_weights

from ....measure import phases
from ....measure.prefill_chunks import PrefillChunks
from ... import faults as fault_registry
from ...faults import Fault, FaultKind
from .. import open_loop
from ..base import Footprint, SideSpec, register

RUNNERS = ("v2", "v1")
fault_registry.register("bundled", [
    *(Fault(f.name, FaultKind.RUNNER, f.bug_class) for f in FAULTS.values()),
    *(Fault(f.name, FaultKind.RUNNER, f.bug_class, coverage=True)
      for f in COVERAGE_FAULTS.values())])
# The bundled model's attention (runner_impl/model/llama.py), by the name a suite's
# `attention_backend` gives it: one backend per device and dtype, no choice
BACKEND_KINDS = {"TORCH": "reference paged attention",
                 "TRITON": "paged varlen + fused decode", "TORCH_SDPA": ""}


def attention_backend(device: str, dtype: str) -> str:
    """The bundled model's one attention backend on `device` at `dtype` ("auto": bfloat16
    on CUDA): Triton paged kernels for bf16/fp16 on CUDA, PyTorch otherwise."""
    if not device.startswith("cuda"):
        return "TORCH"
    return "TRITON" if dtype in ("auto", "bfloat16", "float16") else "TORCH_SDPA"
# Both runners draw sampled tokens with the same code (runner_impl/sampler.py), so the same
# seed promises the same stream on either.
SAMPLER = "runner_impl.sampler (exponential race, one torch.Generator per request seed)"


def _version() -> str:
    try:
        return version("mrbench")
    except PackageNotFoundError:
        return "source tree"


def _draft_model(side: SideSpec, options: EngineOptions) -> str | None:
    if options.num_speculative_tokens == 0 or options.speculative_method != "draft":
        return None
    if options.draft_model:
        return options.draft_model
    return side.model or str(default_model_dir())     # self-drafting: exercises the path


def _kv_cache_kwargs(options: EngineOptions) -> dict[str, Any]:
    """The workload's KV-cache shape as the bundled engine's arguments (block size only
    where asked: the engine's default otherwise)."""
    kw: dict[str, Any] = dict(num_kv_blocks=options.num_kv_blocks,
                              enable_prefix_caching=options.enable_prefix_caching)
    if options.block_size:
        kw["block_size"] = options.block_size
    return kw


def label_phases(llm: LLM) -> phases.PhaseProbe:
    """Put the harness's step and phase ranges around the methods of every runner of a
    bundled `LLM` (each instance; runner_impl itself emits no profiler labels)."""
    probe = phases.PhaseProbe()
    phase_map = phases.BUNDLED_V2 if llm.config.runner == "v2" else phases.BUNDLED_V1
    for core in llm.cores:
        got = phases.install(core.runner, phase_map)
        for p, paths in got.attached.items():
            probe.attached.setdefault(p, [])
            probe.attached[p] += [x for x in paths if x not in probe.attached[p]]
        probe.missing += [m for m in got.missing if m not in probe.missing]
    return probe


class BundledSession:
    step_label = phases.STEP_LABEL
    phase_labels = dict(phases.PHASE_LABELS)

    def __init__(self, side: SideSpec, options: EngineOptions) -> None:
        t0 = time.perf_counter()
        self.side, self.options = side, options
        self.llm = LLM(side.model, runner=side.runner, device=side.device, seed=side.seed,
                       faults=side.faults, max_num_seqs=options.max_num_seqs,
                       max_num_batched_tokens=options.max_num_batched_tokens,
                       num_speculative_tokens=options.num_speculative_tokens,
                       speculative_method=options.speculative_method,
                       draft_model=_draft_model(side, options),
                       pd_disagg=options.pd_disagg, dtype=options.dtype,
                       logprobs_mode=options.logprobs_mode,
                       debug_poison_freed_slots=options.state_audit and side.runner == "v2",
                       **_kv_cache_kwargs(options))
        self.startup_s = time.perf_counter() - t0      # load + warmup
        self.probe = label_phases(self.llm)
        self.vocab_size = self.llm.model_config.vocab_size
        self._audits: list[AuditSample] = []
        self.auditing = False          # the driver turns it on outside timed passes
        self._step0 = self._step_counts()
        self._kv0 = self._kv_counts()
        self._admitted = self._reused = 0
        self._slots_seen: set[tuple[str, int]] = set()
        self.llm.add_step_callback(self._count_admissions)
        self._chunks = PrefillChunks()
        self.llm.add_step_callback(self._count_chunks)
        if options.state_audit and side.runner == "v2":
            self.llm.add_step_callback(self._audit)

    def _count_admissions(self, core, sched, out) -> None:
        """Admissions on the instance whose slots hold decode state, and how many went into
        a slot an earlier served request had held (V2's per-slot state; V1 has no slots)."""
        if core.name == "prefill":
            return
        self._admitted += len(sched.scheduled_new_reqs)
        state = getattr(core.runner, "state", None)
        if state is None:
            return
        for r in sched.scheduled_new_reqs:
            slot = state.req_id_to_index.get(r.req_id)
            if slot is None:                       # finished within its first step
                continue
            self._reused += (core.name, slot) in self._slots_seen
            self._slots_seen.add((core.name, slot))

    def _count_chunks(self, core, sched, out) -> None:
        """Each prefill chunk the scheduler handed the runner this step, placed in its
        prompt (first, middle, last) by the tokens computed before the step."""
        n = sched.num_scheduled_tokens
        for r in sched.scheduled_new_reqs:
            self._chunks.chunk(core.name, r.req_id, r.num_computed_tokens, n[r.req_id],
                               len(r.prompt_token_ids))
        cached = sched.scheduled_cached_reqs
        for rid, start in zip(cached.req_ids, cached.num_computed_tokens):
            req = core.scheduler.requests.get(rid)
            if req is not None:
                self._chunks.chunk(core.name, rid, start, n[rid], req.prompt_len)

    def _kv_counts(self) -> dict[str, int]:
        """Preemptions, and with prefix caching its queried and hit tokens (vLLM's
        `prefix_cache_queries` / `prefix_cache_hits`), over the engine's instances so far."""
        scheds = [c.scheduler for c in self.llm.cores]
        out = dict(num_preemptions=sum(s.num_preemptions for s in scheds))
        if self.llm.config.enable_prefix_caching:
            out.update(prefix_cache_queries=sum(s.prefix_cache_queries for s in scheds),
                       prefix_cache_hits=sum(s.prefix_cache_hits for s in scheds))
        return out

    def _step_counts(self) -> dict[str, int]:
        return {c.name: len(c.step_records) for c in self.llm.cores}

    def _audit(self, core, sched, out) -> None:
        """Mirror vs truth after every step (a device read: never during a timed pass).

        After a step the device truth has advanced and the mirror is refreshed only at the
        next step, so a lag (negative slack) is normal; the mirror ahead of the truth by more
        than k is the drift of vLLM PR 42202's bug class."""
        if not self.auditing:
            return
        a = core.runner.audit()
        if not a:
            return
        slack = [v["mirror"] - v["truth"] for v in a.values()]
        self._audits.append(AuditSample(core.name, len(core.step_records) - 1, max(slack),
                                        min(slack), self.options.num_speculative_tokens))

    def _completion(self, o) -> Completion:
        m = o.metrics
        spec = self.options.num_speculative_tokens > 0
        pd = self.options.pd_disagg and m.token_times
        return Completion(o.prompt_token_ids, o.token_ids, o.text, m.arrival_time,
                          list(m.token_times), o.outputs[0].finish_reason,
                          kv_handoff_s=m.kv_handoff_s,
                          first_scheduled_time=m.first_scheduled_time,
                          num_drafts=m.num_drafts if spec else None,
                          num_draft_tokens=m.num_draft_tokens if spec else None,
                          num_accepted_tokens=m.num_accepted_tokens if spec else None,
                          accepted_per_pos=list(m.accepted_per_pos) if spec else None,
                          # the bundled pair's prefill instance samples the first token
                          prefill_done_time=m.token_times[0] if pd else None,
                          logprobs=None if o.outputs[0].logprobs is None else [
                              TokenLogprob(x.logprob, x.rank, list(x.top))
                              for x in o.outputs[0].logprobs])

    def generate(self, prompts: list[str], max_tokens: int, stop: list[str],
                 sampling: Sampling | None = None,
                 logprobs: int | None = None) -> list[Completion]:
        if sampling is None:
            sps: SamplingParams | list[SamplingParams] = SamplingParams(
                temperature=0.0, max_tokens=max_tokens, stop=list(stop), logprobs=logprobs)
        else:
            sps = [SamplingParams(**sampling.engine_kwargs(), seed=seed, max_tokens=max_tokens,
                                  stop=list(stop), logprobs=logprobs) for seed in sampling.seeds]
        return [self._completion(o) for o in self.llm.generate(prompts, sps)]

    def serve(self, requests: list[TimedPrompt]) -> list[Completion]:
        llm = self.llm
        done: dict[str, object] = {}

        def add(r: TimedPrompt, arrival_time: float) -> str:
            sp = SamplingParams(temperature=0.0, max_tokens=r.max_tokens, ignore_eos=True)
            return llm.add_request({"prompt_token_ids": list(r.prompt_token_ids)}, sp,
                                   arrival_time=arrival_time)

        def step() -> None:
            for out in llm.step():
                done[out.request_id] = out
        ids = open_loop.replay(requests, add, step, llm.has_unfinished)
        return [self._completion(done[i]) for i in ids]

    def dispatch_log(self) -> list[tuple[str, str]]:
        return [(phase, str(key[0]) if key else "empty")
                for core in self.llm.cores for phase, key in core.runner.dispatch_log]

    def counters(self) -> dict[str, float]:
        out = dict(admissions=self._admitted, **self._chunks.counters())
        out.update({k: v - self._kv0[k] for k, v in self._kv_counts().items()})
        if self.llm.config.runner == "v2":
            out["slot_reuses"] = self._reused
        return out

    def fits(self, prompt: str, max_tokens: int) -> bool:
        return len(self.llm.tokenizer.encode(prompt)) < self.llm.max_model_len

    def steps(self) -> list[Step]:
        out = []
        for core in self.llm.cores:
            for r in core.step_records[self._step0[core.name]:]:
                kind = r.dispatch_key[0] if r.dispatch_key else "empty"
                out.append(Step(r.instance, r.step, r.t_start, r.t_end, r.num_reqs,
                                r.num_tokens, str(kind), r.cpu_ms, r.invol_switches,
                                r.vol_switches, r.ruler_ms))
        return sorted(out, key=lambda s: s.t_start)

    def reset_steps(self) -> None:
        self._step0 = self._step_counts()
        self._kv0 = self._kv_counts()
        self._audits = []
        self._admitted = self._reused = 0
        self._chunks.reset()

    def audits(self) -> list[AuditSample]:
        return list(self._audits)

    def _attention_backend(self) -> str:
        """What the bundled model's attention runs on here: its name (attention_backend)
        and what it is."""
        cfg = self.llm.config
        name = attention_backend(str(cfg.torch_device), str(cfg.torch_dtype).removeprefix(
            "torch."))
        return f"{name} ({BACKEND_KINDS[name]})" if BACKEND_KINDS.get(name) else name

    def resolved(self) -> dict[str, Any]:
        cfg = self.llm.config
        runner = self.llm.cores[0].runner
        graphs = "FULL (uniform decode) + step graphs" if cfg.use_cuda_graphs else "NONE"
        return dict(target="bundled", runner=cfg.runner, sync_free=cfg.runner == "v2",
                    engine_name=f"runner_impl (mrbench {_version()})",
                    runner_class=f"{type(runner).__module__}.{type(runner).__qualname__}",
                    attention_backend=self._attention_backend(), cudagraph_mode=graphs,
                    phase_probe=self.probe.as_dict(), sampler=SAMPLER,
                    device=str(cfg.torch_device),
                    dtype=str(cfg.torch_dtype).removeprefix("torch."),
                    model=str(self.llm.model_dir),
                    random_weights=is_random_weights(self.llm.model_dir),
                    faults=list(self.side.faults),
                    seed=self.side.seed, startup_s=round(self.startup_s, 3),
                    engine={k: getattr(cfg, k) for k in (
                        "max_num_seqs", "max_num_batched_tokens", "block_size",
                        "num_kv_blocks", "enable_prefix_caching",
                        "num_speculative_tokens", "speculative_method", "pd_disagg",
                        "async_scheduling", "debug_poison_freed_slots", "logprobs_mode")})

    def close(self) -> None:
        self.llm = None


ENGINE_OVERHEAD_BYTES = 1 << 30     # a CUDA context and activations; on CPU torch's heap
ENGINE_HOST_BYTES = 1 << 30         # one engine process (torch imported, the model loaded)


@register("bundled")
class BundledTarget:
    name = "bundled"
    fault_owner = "bundled"       # a target built on this one offers the bundled runner's faults
    reopen_in_process = True      # an engine process may host its sessions one after another

    def preload(self, side: SideSpec) -> tuple[tuple[str, ...], dict[str, str]]:
        """What the process engine processes are forked from imports (harness.run.engines.preload):
        torch and this target, as every bundled engine process does; no environment of its
        own."""
        return ("torch", __name__), {}

    def validate(self, side: SideSpec) -> None:
        if side.runner not in RUNNERS:
            raise BadInput(f"bundled target has runners {', '.join(RUNNERS)}; got {side.runner!r}")
        if side.build:
            raise BadInput(f"bundled@{side.build}: a build names a vLLM environment; the "
                           "bundled runner is the harness's own code (use vllm@BUILD:RUNNER)")
        if side.pd_gpus:
            raise BadInput("--pd-gpus places a vLLM PD pair's runners on two GPUs; the "
                           "bundled runner's pair runs in one process on the side's device")
        for f in side.faults:
            if fault_registry.ruler_pct(f) is not None:   # the latency ruler, slow-step:PCT
                continue
            if f not in KNOWN_FAULTS:
                raise BadInput(f"unknown fault {f!r}; known: {', '.join(sorted(KNOWN_FAULTS))}, "
                               "slow-step:PCT")
        if side.device not in ("cpu", "cuda") and not side.device.startswith("cuda:"):
            raise BadInput(f"device must be cpu or cuda[:N], got {side.device!r}")
        if side.device.startswith("cuda"):
            if not torch.cuda.is_available():
                raise BadInput(f"device {side.device!r} requested but CUDA is not available here")
        if side.model is not None:
            try:
                load_config(side.model)
                load_tokenizer(side.model)
                check_weights(side.model)
            except RunnerError as e:
                raise BadInput(f"--model {side.model}: {e}") from None

    def open(self, side: SideSpec, options: EngineOptions) -> BundledSession:
        self.validate(side)
        try:
            return BundledSession(side, options)
        except RunnerError as e:
            raise BadInput(f"bundled target: {e}") from None

    def context_len(self, side: SideSpec) -> int:
        return load_config(side.model or default_model_dir()).max_position_embeddings

    def info(self) -> dict[str, Any]:
        return dict(runners=list(RUNNERS), faults=fault_registry.catch_matrix(self.fault_owner),
                    coverage_faults=fault_registry.coverage_faults(self.fault_owner))

    def unsupported(self, side: SideSpec, options: EngineOptions,
                    needs: frozenset[str] = frozenset()) -> str | None:
        if options.num_speculative_tokens and options.speculative_method not in (
                "ngram", "draft"):
            return (f"the bundled runner drafts with ngram or a draft model, not "
                    f"{options.speculative_method!r} (unsupported here)")
        asked = options.engine_args.get("attention_backend")      # a suite's (its sweep)
        own = attention_backend(side.device, options.dtype)
        if isinstance(asked, str) and asked.upper() not in (own, "AUTO"):
            return (f"the bundled runner has one attention backend on {side.device}, {own}; "
                    f"not {asked} (unsupported here)")
        return None

    def engine_key(self, side: SideSpec, options: EngineOptions) -> Any:
        return (side, replace(options, gpu_memory_share=None))   # it sizes its own KV cache

    def footprint(self, side: SideSpec, options: EngineOptions) -> Footprint:
        """Twice its weights (weights and its own KV cache are of one order for the bundled
        models) plus a process's context (a CUDA context, or torch's host memory)."""
        model = Path(side.model) if side.model else default_model_dir()
        weights = sum(f.stat().st_size for f in model.glob("*.safetensors"))
        return Footprint(device=2 * weights + ENGINE_OVERHEAD_BYTES, host=ENGINE_HOST_BYTES)
