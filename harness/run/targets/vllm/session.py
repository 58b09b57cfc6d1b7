"""One side on real vLLM: one engine (colocated) or a PD pair, driven step by step.

The harness stamps each step and token the same way it does on the bundled runner, counts
vLLM's own sync-check warnings where armed, and hands PD requests from the prefill to the
decode engine as vLLM's disaggregation proxy does (the class docstring says how).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections import Counter
from typing import Any

import torch

from mrbench.contract import (
    AuditSample,
    Completion,
    EngineOptions,
    Sampling,
    Step,
    TimedPrompt,
)

from ....measure import phases
from ... import faults as fault_registry
from .. import open_loop
from ..base import SideSpec, Unsupported
from ..bundled.runner_parts import thread_clock
from . import dispatch, faults, kv_timing, pd_nixl, ranks, ruler, worker_times
from .engine import StepWatchdog, VllmEngine, token_logprobs
from .engine_args import llm_kwargs, pd_block_size, pd_engine_kwargs
from .environment import (
    engine_env,
    kv_faults,
    min_kv_bytes,
    nixl,
    nixl_kv_cache_bytes,
    pd_worker_binding,
    planned_kv_cache_bytes,
    runners_in_workers,
    start_error,
    tensor_parallel,
    unsupported_reason,
    visible_gpu,
    weight_bytes,
)
from .model_inspection import inspection_in_fork
from .record import record_of
from .sync_check import SyncWarnings


class VllmSession:
    """One side of a comparison on real vLLM: one engine (colocated), or a PD pair - a
    prefill engine and a decode engine joined by vLLM's KV connector
    (harness/run/targets/vllm/kv_connector.py), both running the side's runner.

    A PD request goes the way vLLM's own disaggregation proxy sends it: to the prefill
    engine with max_tokens = 1 (its token is dropped), then, once that finished, with its
    full parameters to the decode engine, which loads the prompt's KV through the connector,
    computes the prompt's tail and decodes. The user's first token is the decode engine's,
    so TTFT = prefill (queue + compute + save) + hand-off (load) + the decode engine's first
    step; the request row has the prefill part and the connector time (`prefill_ms`,
    `kv_handoff_ms`), and its ITL is the decode engine's alone.

    Where vLLM runs the runners in its workers (`environment.runners_in_workers`: tensor
    parallel, a PD pair with drafts), `ranks` measures each engine's runner there; the
    engine cores stay here, stepped by this session."""

    step_label = phases.STEP_LABEL

    def __init__(self, side: SideSpec, options: EngineOptions, model: str,
                 model_config: dict, max_model_len: int) -> None:
        began = time.perf_counter()
        why = unsupported_reason(side, options)
        if why:
            raise Unsupported(why)
        self.tp = tensor_parallel(side, options)
        os.environ.update(engine_env(side, self.tp))
        if side.device.startswith("cuda:"):          # this engine's process sees one GPU
            os.environ.setdefault("CUDA_VISIBLE_DEVICES", side.device.split(":", 1)[1])
        self.side, self.options, self.model = side, options, model
        self.pd = options.pd_disagg
        self.phase_labels = dict(phases.PHASE_LABELS)
        if self.pd:
            self.phase_labels[phases.TRANSFER_PHASE] = phases.TRANSFER_LABEL
        self.sync = SyncWarnings(side.vllm_sync_check)
        historic, self.ruler_pct = fault_registry.split(side.faults)
        historic = tuple(f for f in historic if f not in kv_faults(side))   # in the workers
        self.faults_applied = faults.apply(historic) if historic else []
        self.faults_applied += [dict(fault=f, function="kv_nixl.MrbenchNixlConnector")
                                for f in kv_faults(side)]
        self.ruler = (ruler.StepRuler(self.ruler_pct, side.device) if self.ruler_pct
                      else None)
        # CPU vLLM: no graph classes; runners in vLLM's workers: not read there yet
        self.in_workers = runners_in_workers(side, options)
        self.reads_dispatch = side.device.startswith("cuda") and not self.in_workers
        if self.reads_dispatch:
            dispatch.install()      # before the engine exists: its warmup is recorded
        self.nixl = nixl(side, options)
        kw = llm_kwargs(side, options, model, max_model_len)
        if side.device.startswith("cuda"):
            kw["kv_cache_memory_bytes"] = planned_kv_cache_bytes(
                kw["gpu_memory_utilization"], torch.cuda.mem_get_info()[1], weight_bytes(model))
            if self.nixl:
                kw["kv_cache_memory_bytes"] = nixl_kv_cache_bytes(
                    kw["kv_cache_memory_bytes"],
                    min_kv_bytes(side, options, model_config, max_model_len))
        self._kv_dir: str | None = None
        self.engines: dict[str, VllmEngine] = {}
        self.ranks: ranks.Ranks | None = None
        self.transfers = pd_nixl.Transfers()
        if self.pd and not self.nixl:
            self._kv_dir = tempfile.mkdtemp(prefix="mrbench-kv-",
                                            dir=os.environ.get("MRBENCH_KV_DIR") or None)
        if self.pd:
            roles = (("prefill", "kv_producer"), ("decode", "kv_consumer"))
        else:
            roles = (("colocated", None),)
        self.gpus = side.pd_gpus if self.pd else None
        for i, (instance, role) in enumerate(roles):
            ekw = (pd_engine_kwargs(kw, role, self._kv_dir, side.kv_connector, side.device)
                   if role else kw)
            try:
                with visible_gpu(self.gpus, i), inspection_in_fork(), \
                        pd_nixl.engine_environment(self.nixl,
                                                   pd_worker_binding(side, options, i),
                                                   key=f"{side!r}/{instance}"):
                    self.engines[instance] = VllmEngine(instance, ekw)
            except Exception as e:
                self.close()
                raise start_error(e, side, options, instance if self.pd else None) from e
        self.startup_s = sum(e.startup_s for e in self.engines.values())
        built = [e.built_at for e in self.engines.values()]
        compiled = [c for e in self.engines.values() if (c := e.compile_s()) is not None]
        # where this start's time went (the manifest's engines.starts[].phases): vLLM's
        # import and the harness's setup before the first LLM(...), the LLM(...) calls
        # (vLLM's config and model inspection, load, compile, graph capture, warmup), of
        # which vLLM's own compile seconds where it keeps them
        self.start_phases: dict[str, float | None] = dict(
            before_engine_s=round(built[0][0] - began, 3),
            engine_s=round(self.startup_s, 3),
            compile_s=round(sum(compiled), 3) if compiled else None)
        for e in self.engines.values():
            got = "v2" if e.uses_v2() else "v1"
            if got != side.runner:
                raise RuntimeError(
                    f"asked vLLM for the {side.runner} model runner with "
                    f"VLLM_USE_V2_MODEL_RUNNER={engine_env(side)['VLLM_USE_V2_MODEL_RUNNER']}"
                    f" but its {e.instance} engine built {e.runner_class()} ({got})")
            if self.reads_dispatch:
                dispatch.serving(e.runner())
        # runners in vLLM's workers (tensor parallel, or a process per runner): each rank's
        # runner is labelled, profiled and audited in its own worker (ranks);
        # otherwise each engine's one runner here
        self.ranks = (ranks.Ranks({n: e.llm for n, e in self.engines.items()},
                                       side.runner, tuple(historic), self.ruler_pct)
                      if self.in_workers else None)
        if self.ruler is not None:       # in the workers, where the steps are timed
            self.faults_applied.append(self.ruler.record(in_workers=self.ranks is not None))
            if self.ranks is not None:
                self.ruler = None
        self.probes = ({} if self.ranks else
                       {name: phases.install(e.runner(), phases.VLLM_V2 if e.uses_v2()
                                             else phases.VLLM_V1)
                        for name, e in self.engines.items()})
        first = next(iter(self.engines.values()))
        self.tokenizer = first.llm.get_tokenizer()
        self.vocab_size = first.engine.vllm_config.model_config.get_vocab_size()
        self.max_model_len = max_model_len
        self.auditing = False
        self._audits: list[AuditSample] = []
        self._steps: list[Step] = []
        self._worker_timed = 0           # steps before this one carry their workers' times
        self._worker_untimed = 0         # steps whose workers' times could not be matched
        self._moves: dict[int, dict[str, int]] = {}   # PD in workers: step -> KV it moved
        self._next_id = 0
        self._idle_steps = 0
        self._kv_wait = pd_nixl.KvWait(f"{side.target}:{side.runner}")
        self._watchdog = StepWatchdog()
        self._counters0 = self._counter_totals()
        self._pd_totals: Counter[str] = Counter()
        # the harness's instrumentation after the engines: probes, workers' ranks, tokenizer
        self.start_phases["after_engine_s"] = round(time.perf_counter() - built[-1][1], 3)

    @property
    def _front(self) -> VllmEngine:
        """Where requests enter: the only engine, or the prefill engine of a pair."""
        return self.engines["prefill" if self.pd else "colocated"]

    @property
    def back(self) -> VllmEngine:
        """Where tokens come from: the only engine, or the decode engine of a pair."""
        return self.engines["decode" if self.pd else "colocated"]

    def _counter_totals(self) -> dict[str, float]:
        out: Counter[str] = Counter()
        for e in self.engines.values():
            out.update(e.counter_totals())
        if not self.options.enable_prefix_caching:       # vLLM counts them as 0 then
            out.pop("prefix_cache_queries", None)
            out.pop("prefix_cache_hits", None)
        return dict(out)

    # -- driving the engines -------------------------------------------------------------
    def _begin(self) -> None:
        self._arrivals: dict[str, float] = {}
        self._token_times: dict[str, list[float]] = {}
        self._done: dict[str, Any] = {}
        self._params: dict[str, Any] = {}            # PD: the decode engine's parameters
        self._prefill: dict[str, tuple[float | None, float]] = {}   # PD: scheduled, done
        self._kv_s: Counter[str] = Counter()
        self._kv_loaded: Counter[str] = Counter()
        self.transfers.clear()
        if self._kv_dir:             # a pass never loads KV a previous pass left behind
            shutil.rmtree(self._kv_dir, ignore_errors=True)
            os.makedirs(self._kv_dir, exist_ok=True)

    def _add(self, prompt: Any, params: Any, arrival: float) -> str:
        rid = str(self._next_id)
        self._next_id += 1
        self._arrivals[rid] = arrival
        if self.pd:
            self._params[rid] = params
            params = (pd_nixl.with_transfer_params(params, pd_nixl.PREFILL_PARAMS)
                      if self.nixl else params.clone())
            params.max_tokens, params.min_tokens = 1, 0
        self._front.add(rid, prompt, params)
        return rid

    def has_unfinished(self) -> bool:
        return any(e.has_unfinished() for e in self.engines.values())

    def _step(self) -> None:
        """One step of each engine that has work (prefill first: a request it finishes
        reaches the decode engine in the same round)."""
        ran = False
        for e in self.engines.values():
            if e.has_unfinished():
                ran |= self._step_engine(e)
        self._idle_steps = 0 if ran else self._idle_steps + 1
        if self.nixl and self._kv_wait.waiting(ran, self.back.core()):
            return
        if self._idle_steps >= 200 and self.has_unfinished():
            stuck = [f"{e.instance} ({len(e.core().scheduler.requests)} requests)"
                     for e in self.engines.values() if e.has_unfinished()]
            raise RuntimeError(f"vLLM scheduled nothing in 200 rounds of steps with requests "
                               f"waiting on the {', '.join(stuck)} engine; stopped rather "
                               f"than spin")

    def _step_engine(self, e: VllmEngine) -> bool:
        clock0 = thread_clock()     # in-process engine core (VLLM_ENABLE_V1_MULTIPROCESSING=0)
        t0 = time.perf_counter()
        try:
            with self._watchdog.stepping(f"{self.side.target}:{self.side.runner} "
                                         f"{e.instance}"), \
                    torch.profiler.record_function(self.step_label):
                outs = e.step()
                s = e.last_sched
                ran = s is not None and bool(s.total_num_scheduled_tokens)
                # the ruler: inside the timed step, before its tokens are stamped; its
                # device spin is one launch, so not in the profiled (auditing) pass
                ruler_ms = (self.ruler.spin_after(t0, on_device=not self.auditing)
                            if self.ruler and ran else None)
        except Exception as ex:
            if not self.pd:
                raise
            raise RuntimeError(f"the PD pair's {e.instance} engine failed in a step: "
                               f"{type(ex).__name__}: {ex}") from ex
        t1 = time.perf_counter()
        clock = thread_clock().since(clock0)
        self.sync.steps += 1
        if self.pd:
            moved = self._moved_by(e)
            if self.ranks is None:
                self._share_transfer(moved, kv_timing.take())
            elif ran and moved:        # its seconds come with the step's workers' times
                self._moves[len(self._steps)] = moved
        if ran:
            self._steps.append(Step(e.instance, len(self._steps), t0, t1,
                                    len(s.num_scheduled_tokens), s.total_num_scheduled_tokens,
                                    e.kind(s), *clock, ruler_ms=ruler_ms))
            if self.auditing:               # outside the step range: the read is not counted
                self._audits += self._audit(e, len(self._steps) - 1)
        for o in outs:
            if e.instance == "prefill":
                if o.finished:
                    self._hand_off(o, t1)
                continue
            n = len(o.outputs[0].token_ids)
            times = self._token_times.setdefault(o.request_id, [])
            times.extend([t1] * (n - len(times)))
            if o.finished:
                self._done[o.request_id] = o
        return ran

    def _audit(self, e: VllmEngine, step_index: int) -> list[AuditSample]:
        """The state audit after a step: the engine's runner here, or every rank's in its
        worker (an instance per rank where an engine has several: "colocated/rank1")."""
        slack = self.options.num_speculative_tokens
        if self.ranks is None:
            a = e.audit(step_index, slack)
            return [] if a is None else [a]
        return [AuditSample(name, step_index, hi, lo, slack)
                for name, hi, lo in self.ranks.audit(e.instance)]

    def _hand_off(self, o: Any, t_done: float) -> None:
        """The prefill engine finished a request: its KV is in the connector's store; the
        decode engine gets the same prompt, as vLLM's disaggregation proxy sends it."""
        rid = o.request_id
        m = o.metrics
        scheduled = getattr(m, "scheduled_ts", None) if m is not None else None
        self._prefill[rid] = (scheduled or None, t_done)
        params = self._params.pop(rid)
        if self.nixl:                   # where the prefill engine keeps the prompt's blocks
            params = pd_nixl.with_transfer_params(params, o.kv_transfer_params)
        self.back.add(rid, {"prompt_token_ids": list(o.prompt_token_ids or [])}, params)

    def _moved_by(self, e: VllmEngine) -> dict[str, int]:
        """{request: tokens} whose KV the engine's step just scheduled saved or loaded (the
        scheduler-side connector's record; vLLM ids carry a suffix after the last '-'); the
        loaded ones are counted."""
        step = getattr(e.connector(), "last_step", None) or {}
        for rid, n in step.get("load", {}).items():
            self._kv_loaded[rid.rsplit("-", 1)[0]] += n
        return {rid.rsplit("-", 1)[0]: n for kind in ("store", "load")
                for rid, n in step.get(kind, {}).items()}

    def _share_transfer(self, moved: dict[str, int], seconds: float) -> None:
        """The connector's host time in one step, shared among the requests whose KV it
        saved or loaded, by tokens moved."""
        total = sum(moved.values())
        for rid, n in moved.items():
            self._kv_s[rid] += seconds * (n / total if total else 1 / len(moved))

    def _completion(self, rid: str, logprobs: int | None = None) -> Completion:
        o = self._done[rid]
        c = o.outputs[0]
        times = list(self._token_times.get(rid, []))
        kv: pd_nixl.Transfer | None = None
        if self.pd:
            scheduled, prefill_done = self._prefill[rid]
            kv_s = self._kv_s.get(rid, 0.0)
            if self.nixl:
                kv = self.transfers.count(rid, self._pd_totals)
                kv_s = kv.seconds
                self._kv_loaded[rid] = kv.blocks * pd_block_size(self.side.device)
            self._pd_totals["pd_requests"] += 1
            self._pd_totals["pd_kv_loaded_tokens"] += self._kv_loaded.get(rid, 0)
            blocks = (len(o.prompt_token_ids or []) - 1) // pd_block_size(self.side.device)
            if blocks and not self._kv_loaded.get(rid):
                self._pd_totals["pd_kv_recomputed"] += 1   # the example's lookup missed
        else:
            m = o.metrics
            scheduled = getattr(m, "scheduled_ts", None) if m is not None else None
            prefill_done, kv_s = None, None
        return Completion(list(o.prompt_token_ids or []), list(c.token_ids), c.text,
                          self._arrivals[rid], times, c.finish_reason, kv_handoff_s=kv_s,
                          first_scheduled_time=scheduled if scheduled else None,
                          prefill_done_time=prefill_done,
                          kv_bytes=kv.bytes if kv else None,
                          kv_arrived=kv.arrived if kv else None,
                          logprobs=None if logprobs is None else token_logprobs(
                              c.token_ids, c.logprobs, logprobs))

    def _run(self, add_all) -> list[str]:
        self._begin()
        ids = add_all()
        while self.has_unfinished():
            self._step()
        self._settle()
        return ids

    def _settle(self) -> None:
        """After the engines ran dry: steps timed in the workers take their times, and
        their KV transfer seconds go to the requests they moved (the completions read
        them)."""
        if self.ranks is not None:
            self._time_in_workers()
        if self.nixl:
            self.transfers.take(self.ranks.kv_transfers("decode"))

    def generate(self, prompts: list[str], max_tokens: int, stop: list[str],
                 sampling: Sampling | None = None,
                 logprobs: int | None = None) -> list[Completion]:
        from vllm import SamplingParams  # lazy: vLLM is optional (the vllm target only)
        if sampling is None:
            sps = [SamplingParams(temperature=0.0, max_tokens=max_tokens, stop=list(stop),
                                  logprobs=logprobs)] * len(prompts)
        else:
            sps = [SamplingParams(**sampling.engine_kwargs(), seed=seed, max_tokens=max_tokens,
                                  stop=list(stop), logprobs=logprobs)
                   for seed in sampling.seeds]

        def add_all():
            now = time.perf_counter()
            return [self._add(p, sp, now) for p, sp in zip(prompts, sps)]
        return [self._completion(r, logprobs) for r in self._run(add_all)]

    def serve(self, requests: list[TimedPrompt]) -> list[Completion]:
        from vllm import SamplingParams  # lazy: vLLM is optional (the vllm target only)
        self._begin()

        def add(r: TimedPrompt, arrival_time: float) -> str:
            sp = SamplingParams(temperature=0.0, max_tokens=r.max_tokens, ignore_eos=True)
            return self._add({"prompt_token_ids": list(r.prompt_token_ids)}, sp, arrival_time)
        ids = open_loop.replay(requests, add, self._step, self.has_unfinished)
        self._settle()
        return [self._completion(i) for i in ids]

    # -- the rest of the Session interface -----------------------------------------------
    def dispatch_log(self) -> list[tuple[str, str]]:
        """(phase, batch class) of every step the runner executed since the engine was
        built: "warmup", "dummy" (runs that warm nothing), "serve" (mrbench.harness.run.targets.
        dispatch says what each runner's warmup is); a PD pair's two runners one after
        the other. Empty on CPU, where vLLM compiles one generic shape and dispatches no
        CUDA-graph classes: the check is not made."""
        if not self.reads_dispatch:
            return []
        return [x for e in self.engines.values() for x in dispatch.log(e.runner())]

    def counters(self) -> dict[str, float]:
        now = self._counter_totals()
        out = {k: v - self._counters0.get(k, 0.0) for k, v in now.items()}
        out.update({k: float(v) for k, v in self._pd_totals.items()})
        for e in self.engines.values():             # prefill chunks (engine counts)
            for k, v in e.chunks.counters().items():
                out[k] = out.get(k, 0.0) + v
        if self.ranks is not None:
            out["worker_untimed_steps"] = float(self._worker_untimed)
        out.update(self.sync.counters())
        return out

    def fits(self, prompt: str, max_tokens: int) -> bool:
        return len(self.tokenizer.encode(prompt)) < self.max_model_len

    def steps(self) -> list[Step]:
        if self.ranks is not None:
            self._time_in_workers()
        return list(self._steps)

    def _time_in_workers(self) -> None:
        worker_times.time_in_workers(self)

    def reset_steps(self) -> None:
        if self.ranks is not None:               # the workers' times of steps gone by
            for name in self.engines:
                self.ranks.step_times(name)
        self._worker_timed = self._worker_untimed = 0
        self._moves.clear()
        self._steps = []
        self._counters0 = self._counter_totals()
        self._pd_totals = Counter()
        self.sync.reset()
        self._audits = []
        for e in self.engines.values():
            e.chunks.reset()

    def audits(self) -> list[AuditSample]:
        return list(self._audits)

    def resolved(self) -> dict[str, Any]:
        return record_of(self)

    def phase_probe(self, instance: str) -> dict[str, Any]:
        """What one engine's phase labels attached to (in its workers, or here)."""
        return (self.ranks.phase_probe(instance) if self.ranks
                else self.probes[instance].as_dict())

    def close(self) -> None:
        if self.ranks is not None:       # end the workers' processes and their shared
            for e in self.engines.values():             # memory now, not at the GC's leisure
                with contextlib.suppress(Exception):
                    e.engine.engine_core.shutdown()
            self.ranks = None
        for e in self.engines.values():
            e.close()
        self.engines = {}
        if self._kv_dir:
            shutil.rmtree(self._kv_dir, ignore_errors=True)
            self._kv_dir = None


