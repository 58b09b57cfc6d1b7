"""Which model a run measures when `--model` names a folder, `tiny`, or nothing.

On a GPU the vllm target measures a real-shape model by default: a random-weight Llama at
Llama-3.2-1B's shape (`mrbench model make --preset llama-1b`), made once into the model
cache and reused by every later run and every build of a two-build study. The bundled
4.75M-parameter model is too small there: its steps are bound by the host, so a lost
overlap of CPU and GPU work does not lengthen them, and its distributions are so sure of
GSM8K that seeded sampling is greedy in effect, so a changed sampler noise moves almost no
stream (docs/vllm-gpu.md, "Real shape by default"). GSM8K accuracy on random weights
measures nothing, and its check says "not measured: random weights"; token agreement,
latency, counts, state and coverage are what a real-shape run judges.

`--model tiny` keeps the bundled model (also on a GPU); on CPU, and for the bundled target
or a run across engines, nothing changes: the bundled model is the default there.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from mrbench.contract import BadInput

from .targets.bundled.runner_parts import DEFAULT_MODEL_DIR, random_presets

GPU_PRESET = "llama-1b"          # the vllm target's default on a GPU
GPU_SEED = 0
BUNDLED = "tiny"                 # `--model tiny`: the bundled model, wherever the run is


def _say(line: str) -> None:
    print(f"[mrbench model] {line}", file=sys.stderr, flush=True)


def resolve(model: str | None, targets: set[str], device: str) -> str | None:
    """The model folder both sides run (None: each target's bundled default).

    A named folder is taken as it is; `tiny` is the bundled model; with none named, a run
    whose sides are all the vllm target on CUDA gets the real-shape default from the model
    cache (made here the first time, drawn on the GPU: seconds). Where CUDA is not there,
    nothing is made: the target's own check says that CUDA is missing."""
    if model == BUNDLED:
        return str(DEFAULT_MODEL_DIR)
    if model is not None:
        return model
    if targets != {"vllm"} or not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    try:
        return str(random_presets.cached_model(GPU_PRESET, seed=GPU_SEED, device="cuda",
                                               progress=_say))
    except (ValueError, OSError) as e:
        raise BadInput(f"the default real-shape model ({GPU_PRESET}) could not be made in "
                       f"{random_presets.cache_dir()}: {e}; name one with --model DIR, or "
                       f"--model {BUNDLED}") from None


def describe(model_dir: str | Path | None) -> dict[str, object]:
    """What the manifest and report say of a model (None: the bundled one): its folder, and
    for a made model its preset, parameters, shape and that its weights are random (its
    sidecar)."""
    path = Path(model_dir) if model_dir is not None else DEFAULT_MODEL_DIR
    out: dict[str, object] = dict(path=str(path), name=path.name)
    try:
        meta = json.loads((path / random_presets.SIDECAR).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = None
    if isinstance(meta, dict):
        shape = meta.get("shape") or {}
        out.update(preset=meta.get("preset"), parameters=meta.get("parameters"),
                   dtype=meta.get("dtype"), random_weights=bool(meta.get("random_weights")),
                   shape={k: shape.get(k) for k in ("hidden_size", "num_hidden_layers",
                                                     "num_attention_heads",
                                                     "num_key_value_heads", "vocab_size")
                          if k in shape})
    return out
