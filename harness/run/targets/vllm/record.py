"""What one vLLM side ran as: the record a session gives the run's manifest (its
`resolved`): the runner and its class, the vLLM build, the attention backend and CUDA-graph
mode, the KV cache, where the steps were timed, the sync check, the engine's settings and
what the engine made of the user's engine arguments, and a PD pair's two engines."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base import engine_args_of
from ..bundled.runner_parts import is_random_weights
from . import engine_args
from .engine_args import NIXL_CONNECTOR, PD_CONNECTOR, engine_key
from .environment import SAMPLERS, installed_version, vllm_commit

if TYPE_CHECKING:
    from .session import VllmSession


def record_of(s: VllmSession) -> dict[str, Any]:
    """The manifest's record of session `s` (its `Session.resolved`)."""
    import vllm  # lazy: vLLM is optional (the vllm target only)
    back = s.back
    cfg = back.engine.vllm_config
    mc, sc = cfg.model_config, cfg.scheduler_config
    cg = getattr(cfg.compilation_config, "cudagraph_mode", None)
    user_args = engine_args_of(s.side, s.options)
    out = dict(target="vllm", runner="v2" if cfg.use_v2_model_runner
               else "v1", runner_class=(s.ranks.runner_class(back.instance)
                                        if s.ranks else back.runner_class()),
               sync_free=s.side.runner == "v2",
               sampler=SAMPLERS["v2" if cfg.use_v2_model_runner else "v1"],
               engine_name=f"vLLM {getattr(vllm, '__version__', installed_version())}",
               vllm_version=getattr(vllm, "__version__", installed_version()),
               vllm_commit=vllm_commit(), vllm_dir=str(Path(vllm.__file__).parent),
               build=s.side.build,
               attention_backend=", ".join(
                   s.ranks.attention_backends(back.instance) if s.ranks
                   else back.attention_backends()) or "unknown",
               cudagraph_mode=getattr(cg, "name", str(cg)) if cg is not None else "NONE",
               kv_cache=back.kv_cache(),
               phase_probe=s.phase_probe(back.instance),
               tensor_parallel=(s.ranks.resolved(back.instance)
                                if s.ranks and s.tp > 1 else None),
               # each engine's runner processes, where vLLM's workers hold them
               runner_processes=({n: s.ranks.resolved(n) for n in s.engines}
                                 if s.ranks else None),
               step_time=("the runner's in its workers: the first rank's execute_model "
                          "to the last rank's end of sample_tokens" if s.ranks
                          else "the engine's step call, in this process"),
               **s.sync.resolved(),
               fault_patches=s.faults_applied,
               env={k: os.environ.get(k) for k in (
                   "VLLM_USE_V2_MODEL_RUNNER", "VLLM_ENABLE_V1_MULTIPROCESSING",
                   "VLLM_GPU_SYNC_CHECK", "VLLM_CPU_KVCACHE_SPACE", "VLLM_USE_AOT_COMPILE",
                   "VLLM_CACHE_ROOT")},
               device=s.side.device, dtype=str(mc.dtype).removeprefix("torch."),
               model=s.model, random_weights=is_random_weights(s.model),
               faults=list(s.side.faults), seed=s.side.seed,
               startup_s=round(s.startup_s, 3),
               engine=dict(max_num_seqs=sc.max_num_seqs,
                           max_num_batched_tokens=sc.max_num_batched_tokens,
                           max_model_len=mc.max_model_len,
                           async_scheduling=getattr(sc, "async_scheduling", None),
                           num_speculative_tokens=s.options.num_speculative_tokens,
                           speculative_method=s.options.speculative_method
                           if s.options.num_speculative_tokens else None,
                           pd_disagg=s.pd,
                           # the user's, as given, and what the engine made of them
                           engine_args=dict(user_args),
                           engine_args_read_back=engine_args.read_back(
                               cfg, list(user_args)),
                           engine_key=engine_key(s.side, s.options, s.model)))
    if s.pd:
        out["pd"] = dict(
            connector=f"{NIXL_CONNECTOR} (a measuring subclass of vLLM's NixlConnector, "
                      f"harness/run/targets/vllm/kv_nixl.py)" if s.nixl else
                      f"{PD_CONNECTOR} (a measuring subclass of vLLM's ExampleConnector, "
                      f"harness/run/targets/vllm/kv_connector.py)",
            kv_store=("the prefill engine's KV cache, pulled by the decode engine's worker "
                      "(NIXL READ over UCX)") if s.nixl else
                     "files under a per-session temporary directory",
            gpus=list(s.gpus) if s.gpus else None,     # --pd-gpus, as asked
            instances={n: dict(role=r, runner_class=(s.ranks.runner_class(n)
                                                     if s.ranks else e.runner_class()),
                               startup_s=round(e.startup_s, 3), kv_cache=e.kv_cache(),
                               # read back: the prefill engine never chunks a prompt
                               # (engine_args.pd_engine_kwargs), so its budget differs
                               chunked_prefill=bool(e.engine.vllm_config.scheduler_config
                                                    .enable_chunked_prefill),
                               max_num_batched_tokens=e.engine.vllm_config
                               .scheduler_config.max_num_batched_tokens,
                               phase_probe=s.phase_probe(n))
                       for (n, e), r in zip(s.engines.items(),
                                            ("kv_producer", "kv_consumer"))})
    return out
