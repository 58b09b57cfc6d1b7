"""Attention backends on the vllm target: whether the vLLM a side will run has the backend a
suite asks for (`attention_backend`, swept or set in its `engine_args`), decided before any
engine starts.

Why before: vLLM refuses a backend it cannot build only when the engine starts ("Selected
backend X is not valid for this configuration"), minutes into a run, and on CPU it runs
CPU_ATTN whatever was asked (vllm/platforms/cpu.py `get_attn_backend_cls` logs "Cannot use
X backend on CPU" and goes on): the first would be a failure, the second a run that claims
a backend it never ran. A backend this machine lacks is "unsupported here", with the reason:
- the name must be a member of that vLLM's `AttentionBackendEnum` (its registry; `auto`
  is vLLM's own choice and always there);
- on CPU only CPU_ATTN runs;
- the backend's class must import there (FlashInfer's needs the flashinfer package, which
  the GPU kit of docs/vllm-gpu.md does not carry);
- on CUDA it must take the GPU's compute capability, the model's head size and dtype, and
  the model's kind of attention (MLA or not): the backend's own `supports_*` and `is_mla`
  class methods, where that vLLM has them.
What vLLM still refuses at start is mapped to "unsupported here" too (environment.start_error).

The probe runs in the side's own interpreter (engine_args.probe_command: another
build's vLLM has another registry), once per backend, interpreter, device and model shape.
"""
from __future__ import annotations

import difflib
import functools
import json
import subprocess
from dataclasses import dataclass
from typing import Any

from mrbench.contract import EngineOptions

from ..base import SideSpec
from .engine_args import VERSION_PROBE, probe_command, run_probe

AUTO = "auto"                 # vLLM's own choice (AttentionConfig.validate_backend_before)
CPU_BACKEND = "CPU_ATTN"      # the one backend vLLM's CPU platform builds for dense models

# Run in the side's interpreter with argv NAME DEVICE HEAD_SIZE DTYPE USE_MLA; the last
# stdout line is the JSON {version, names, problem}.
_PROBE = r'''
import json, sys
import importlib.metadata as md
name, device, head_size, dtype, use_mla = sys.argv[1:6]
''' + VERSION_PROBE + r'''try:
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
except ImportError:
    from vllm.attention.backends.registry import AttentionBackendEnum   # older releases
names = list(AttentionBackendEnum.__members__)
problem = None
if name in names and device.startswith("cuda"):
    why = []
    try:
        cls = AttentionBackendEnum[name].get_class()
    except Exception as e:       # ImportError, OSError; ValueError: a placeholder member
        why.append(f"{type(e).__name__}: {e}")
        cls = None
    if cls is not None:
        import torch
        from vllm.platforms import current_platform
        cap = current_platform.get_device_capability()
        if cap is not None and hasattr(cls, "supports_compute_capability") \
                and not cls.supports_compute_capability(cap):
            why.append(f"compute capability {cap.major}.{cap.minor} not supported")
        if hasattr(cls, "supports_head_size") and not cls.supports_head_size(int(head_size)):
            why.append(f"head size {head_size} not supported")
        dt = getattr(torch, dtype, None)
        if dt is not None and hasattr(cls, "supports_dtype") and not cls.supports_dtype(dt):
            why.append(f"dtype {dtype} not supported")
        if hasattr(cls, "is_mla") and cls.is_mla() != (use_mla == "1"):
            why.append("an MLA backend, for a model without MLA" if cls.is_mla()
                       else "not an MLA backend, for a model with MLA")
    problem = "; ".join(why) or None
print(json.dumps(dict(version=version, names=names, problem=problem)))
'''


@dataclass(frozen=True)
class Probed:
    """What a side's vLLM says of one backend: its version, its registry's names (None:
    the probe could not read them, `problem` says why), and why the backend cannot run
    here (None: it can, as far as the class says)."""

    version: str
    names: tuple[str, ...] | None
    problem: str | None = None


@functools.lru_cache(maxsize=None)
def _probe(argv: tuple[str, ...], pythonpath: str | None) -> Probed:
    try:
        out = run_probe(argv, pythonpath)
        got = json.loads(out.stdout.strip().splitlines()[-1])
        return Probed(str(got.get("version") or "unknown"), tuple(got["names"]),
                      got.get("problem"))
    except (OSError, subprocess.TimeoutExpired) as e:
        return Probed("unknown", None, f"could not run {argv[0]} ({e})")
    except (json.JSONDecodeError, IndexError, KeyError, TypeError, AttributeError):
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return Probed("unknown", None, f"could not read vLLM's attention backends with "
                                       f"{argv[0]} ({last[:200]})")


def probe(side: SideSpec, name: str, head_size: int, dtype: str, use_mla: bool) -> Probed:
    """`name` as the vLLM that `side`'s engine will import sees it (cached)."""
    argv, pythonpath = probe_command(side, _PROBE)
    return _probe((*argv, name.upper(), side.device, str(head_size), dtype,
                   "1" if use_mla else "0"), pythonpath)


def backend_problem(name: str, device: str, found: Probed) -> str | None:
    """Why backend `name` cannot run on `device` with the vLLM that gave `found`, ending in
    "(unsupported here)"; None when it can."""
    if name.lower() == AUTO:
        return None
    want = name.upper()
    if found.names is None:
        return f"attention backend {want}: {found.problem} (unsupported here)"
    if want not in found.names:
        near = difflib.get_close_matches(want, found.names, n=1)
        return (f"vLLM {found.version} has no attention backend {want} (not in its "
                f"AttentionBackendEnum" + (f"; did you mean {near[0]}?" if near else "")
                + ") (unsupported here)")
    if not device.startswith("cuda") and want != CPU_BACKEND:
        return (f"vLLM's CPU platform runs {CPU_BACKEND} whatever backend is asked "
                f"(vllm/platforms/cpu.py), so {want} would not run (unsupported here)")
    if found.problem:
        return f"vLLM {found.version}'s {want} cannot run here: {found.problem} (unsupported here)"
    return None


def model_shape(options: EngineOptions, args: dict[str, Any], config: dict, device: str
                ) -> tuple[int, str, bool]:
    """(head size, dtype name, MLA or not) of a model's attention as the engine will run it:
    the engine arguments' dtype over the workload's; "auto" is what llm_kwargs gives vLLM
    (float32 on CPU) or the model's own (bfloat16 where it names none)."""
    heads = int(config.get("num_attention_heads") or config.get("n_head") or 1)
    head = int(config.get("head_dim") or int(config.get("hidden_size") or 64) // heads)
    dtype = str(args.get("dtype") or options.dtype)
    if dtype == "auto":
        dtype = "float32" if device == "cpu" else str(config.get("torch_dtype") or "bfloat16")
    return head, dtype, bool(config.get("kv_lora_rank"))


def unsupported(side: SideSpec, name: str, options: EngineOptions, args: dict[str, Any],
                config: dict) -> str | None:
    """Why `side`'s vLLM cannot run attention backend `name` for this engine shape and
    model (config.json); None when it can."""
    if name.lower() == AUTO:
        return None
    return backend_problem(name, side.device,
                           probe(side, name, *model_shape(options, args, config, side.device)))
