"""Random-weight Llamas at real scale, in Hugging Face format (`mrbench model make`): the
config, sharded safetensors with their index, a tokenizer vLLM loads, and a sidecar that
says the weights are random.

Why random weights at real shapes: what the vllm target measures on GPUs (step time, memory,
tensor parallelism, KV-cache dtypes, quantized kernels) depends on the model's shapes, not
its weights, and a random model needs no download, licence or token. What it cannot give is
a meaningful answer: GSM8K accuracy on it is noise, so `mrbench_model.json` records that the
weights are random (`is_random_weights`), for the harness to say "not measured".

Why no transformers model is built: an 8B model in float32 is 32 GB of host memory and
minutes of HF's own initialisation before a single byte is written. Each tensor is drawn
directly instead (on --device, a generator seeded by the seed and the tensor's name, in
float32, then cast to the dtype), and written in shards of at most MAX_SHARD_BYTES, so
memory peaks at one shard; with --device cuda the drawing is the GPU's, and writing the
files is what is left (on 2 CPU cores llama-1b took 16 s, drawing and writing). Same
preset, seed, device and dtype: the same bytes (a CUDA generator draws other numbers than
the CPU's).

Presets: `tiny` is the shape of the bundled test model (runner_impl/assets/gsm8k-tiny, 4.75M
parameters; its head_dim of 32 is one vLLM's CPU attention takes, the tests' 16 is not)
with N(0, 0.2) weights, whose logits are far from uniform, so that
two engines' greedy tokens agree on it; `llama-1b` and `llama-8b` are Llama-3.2-1B's and
Llama-3.1-8B's shapes with their vocabulary size, N(0, 0.02) weights (HF's
initializer_range) and unit norms. Their context is capped at 8192 tokens with plain RoPE
(theta 500000), not the originals' 131072 with llama3 RoPE scaling: vLLM plans every engine
for the full context by default (its profile run and the least KV cache), which at 131072
would cost each engine start memory no benchmark here uses.

The tokenizer is the character tokenizer (char_tokenizer.py) with unused filler tokens up to
the vocabulary size, so any prompt tokenizes and every id the model can emit decodes.

Beside the model, in `eagle/`, an EAGLE-1 draft head of the preset's shape with random
weights (vLLM's `EagleLlamaForCausalLM`: `fc` over cat(embedding, hidden state) and one
decoder layer without its input norm; embedding and lm_head are the target's). vLLM's Model
Runner V2 speculates only with heads of that kind (no n-gram, no plain draft model in 0.26),
so without one no spec-decode path (its CUDA graphs, its attention builds) runs at real
shape. Its drafts are random tokens the target rejects nearly always: spec decode runs and
is counted, its acceptance measures nothing. The sidecar names the head (`eagle_head`).

Imports nothing of the harness (runner_impl's rule); errors are ValueError for the caller to
word.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch

from .char_tokenizer import BOS, EOS, char_vocab, write_char_tokenizer

SIDECAR = "mrbench_model.json"
MAX_SHARD_BYTES = 4 * 10**9            # HF's convention is decimal GB
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Preset:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    rope_theta: float
    init_std: float
    dtype: str                           # the default --dtype

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


PRESETS: dict[str, Preset] = {
    "tiny": Preset(256, 6, 8, 4, 768, 128, 512, True, 10000.0, 0.2, "float32"),
    "llama-1b": Preset(2048, 16, 32, 8, 8192, 128256, 8192, True, 500000.0, 0.02, "bfloat16"),
    "llama-8b": Preset(4096, 32, 32, 8, 14336, 128256, 8192, False, 500000.0, 0.02,
                       "bfloat16"),
}


def preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]


def config_dict(p: Preset, dtype: str) -> dict:
    """config.json of a preset (LlamaForCausalLM), as transformers and vLLM read it."""
    vocab = char_vocab(p.vocab_size)
    return dict(architectures=["LlamaForCausalLM"], model_type="llama",
                vocab_size=p.vocab_size, hidden_size=p.hidden_size,
                intermediate_size=p.intermediate_size, num_hidden_layers=p.num_hidden_layers,
                num_attention_heads=p.num_attention_heads,
                num_key_value_heads=p.num_key_value_heads, head_dim=p.head_dim,
                hidden_act="silu", max_position_embeddings=p.max_position_embeddings,
                initializer_range=p.init_std, rms_norm_eps=1e-5, use_cache=True,
                tie_word_embeddings=p.tie_word_embeddings, rope_theta=p.rope_theta,
                attention_bias=False, attention_dropout=0.0, mlp_bias=False, pretraining_tp=1,
                bos_token_id=vocab[BOS], eos_token_id=vocab[EOS], pad_token_id=None,
                torch_dtype=dtype)


def plan_tensors(p: Preset) -> dict[str, tuple[int, ...]]:
    """Every weight's name (Hugging Face Llama's) and shape, in writing order."""
    h, kv = p.hidden_size, p.num_key_value_heads * p.head_dim
    q, inter = p.num_attention_heads * p.head_dim, p.intermediate_size
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (p.vocab_size, h)}
    for i in range(p.num_hidden_layers):
        pre = f"model.layers.{i}."
        out.update({pre + "input_layernorm.weight": (h,),
                    pre + "self_attn.q_proj.weight": (q, h),
                    pre + "self_attn.k_proj.weight": (kv, h),
                    pre + "self_attn.v_proj.weight": (kv, h),
                    pre + "self_attn.o_proj.weight": (h, q),
                    pre + "post_attention_layernorm.weight": (h,),
                    pre + "mlp.gate_proj.weight": (inter, h),
                    pre + "mlp.up_proj.weight": (inter, h),
                    pre + "mlp.down_proj.weight": (h, inter)})
    out["model.norm.weight"] = (h,)
    if not p.tie_word_embeddings:
        out["lm_head.weight"] = (p.vocab_size, h)
    return out


EAGLE_DIR = "eagle"      # the draft head's folder inside a made model


def eagle_config_dict(p: Preset, dtype: str) -> dict:
    """config.json of the preset's EAGLE-1 head: the target's with one decoder layer (vLLM
    maps LlamaForCausalLM to its EAGLE head when the speculative method is eagle)."""
    return {**config_dict(p, dtype), "num_hidden_layers": 1}


def eagle_plan_tensors(p: Preset) -> dict[str, tuple[int, ...]]:
    """The EAGLE-1 head's weights: `fc` and one decoder layer without `input_layernorm`
    (vLLM's EagleLlamaForCausalLM takes the embedding and lm_head from the target)."""
    h = p.hidden_size
    layer = {k.removeprefix("model.layers.0."): v for k, v in plan_tensors(p).items()
             if k.startswith("model.layers.0.") and "input_layernorm" not in k}
    return {"fc.weight": (h, 2 * h), **{f"layers.0.{k}": v for k, v in layer.items()}}


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def param_count(p: Preset) -> int:
    return sum(_numel(s) for s in plan_tensors(p).values())


def plan_shards(p: Preset, dtype: str, max_shard_bytes: int = MAX_SHARD_BYTES
                ) -> list[list[str]]:
    """The tensors of each shard, in order: a shard takes tensors while it stays within
    `max_shard_bytes` (a tensor larger than that is a shard of its own)."""
    size = DTYPES[dtype].itemsize
    shards: list[list[str]] = [[]]
    used = 0
    for name, shape in plan_tensors(p).items():
        b = _numel(shape) * size
        if shards[-1] and used + b > max_shard_bytes:
            shards.append([])
            used = 0
        shards[-1].append(name)
        used += b
    return shards


def shard_names(n: int) -> list[str]:
    """`model.safetensors` alone, else Hugging Face's `model-0000i-of-0000n.safetensors`."""
    if n == 1:
        return ["model.safetensors"]
    return [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]


def index_dict(p: Preset, dtype: str, max_shard_bytes: int = MAX_SHARD_BYTES) -> dict:
    """model.safetensors.index.json of a sharded model (written where there are shards)."""
    shards = plan_shards(p, dtype, max_shard_bytes)
    files = shard_names(len(shards))
    shapes = plan_tensors(p)
    total = sum(_numel(shapes[n]) for s in shards for n in s) * DTYPES[dtype].itemsize
    return dict(metadata=dict(total_size=total),
                weight_map={n: f for s, f in zip(shards, files) for n in s})


def tensor_seed(seed: int, name: str) -> int:
    """A tensor's own seed: any one tensor can be drawn again alone, whatever the shards."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little")


def draw(p: Preset, name: str, shape: tuple[int, ...], seed: int, device: str,
         dtype: torch.dtype, key: str | None = None) -> torch.Tensor:
    """One weight on the host: norms are ones; the rest N(0, init_std) drawn in float32,
    seeded by `key` (the name unless given)."""
    if name.endswith("norm.weight"):
        return torch.ones(shape, dtype=dtype)
    gen = torch.Generator(device=device).manual_seed(tensor_seed(seed, key or name))
    t = torch.empty(shape, dtype=torch.float32, device=device)
    t.normal_(0.0, p.init_std, generator=gen)
    return t.to(dtype).cpu()


def make_model(out: str | Path, preset_name: str, *, seed: int = 0, device: str = "cpu",
               dtype: str | None = None, max_shard_bytes: int = MAX_SHARD_BYTES,
               progress: Callable[[str], None] | None = None) -> Path:
    """Write the preset's random Llama to `out` (missing or empty): built in a hidden
    folder beside it and renamed into place when whole, so a failure leaves nothing."""
    return write_model(out, preset(preset_name), name=preset_name, seed=seed, device=device,
                       dtype=dtype, max_shard_bytes=max_shard_bytes, progress=progress)


def write_model(out: str | Path, p: Preset, *, name: str = "custom", seed: int = 0,
                device: str = "cpu", dtype: str | None = None,
                max_shard_bytes: int = MAX_SHARD_BYTES,
                progress: Callable[[str], None] | None = None) -> Path:
    """Write a random Llama of shape `p` to `out` (missing or empty), as `make_model` does
    for a preset: the one maker of random Llamas, also for the small shapes tests and probes
    want (`name` is what the sidecar and the progress lines call it)."""
    dtype = dtype or p.dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: one of {', '.join(DTYPES)}")
    if device not in DEVICES:
        raise ValueError(f"device {device!r}: one of {', '.join(DEVICES)}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda: CUDA is not available here")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} exists and is not an empty directory")
    say = progress or (lambda _: None)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        _write(tmp, p, name, seed, device, dtype, max_shard_bytes, say)
        umask = os.umask(0)
        os.umask(umask)
        for f in (tmp, *tmp.iterdir()):      # mkdtemp's 0700: readable as any folder is
            f.chmod((0o777 if f.is_dir() else 0o666) & ~umask)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def cache_dir() -> Path:
    """Where made models are kept between runs: $MRBENCH_MODEL_CACHE, else
    ~/.cache/mrbench/models."""
    env = os.environ.get("MRBENCH_MODEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "mrbench" / "models"


def cached_model(preset_name: str, *, seed: int = 0, device: str = "cpu",
                 dtype: str | None = None, root: Path | None = None,
                 progress: Callable[[str], None] | None = None) -> Path:
    """The preset's random Llama in the model cache, made the first time it is asked for
    and reused after: a real-shape model is a GPU run's default, and writing 2.5 GB every
    run (and for every build of a two-build study) would cost more than the run's engines
    start. Keyed by everything that changes its bytes (preset, seed, dtype, the device that
    drew it: a CUDA generator draws other numbers than the CPU's). Two runs asking at once
    take turns on a lock file; `make_model`'s rename means a folder there is whole."""
    import fcntl  # lazy: POSIX only, and only where a model is cached

    p = preset(preset_name)
    dtype = dtype or p.dtype
    root = root or cache_dir()
    out = root / f"{preset_name}-seed{seed}-{dtype}-{device}"
    if (out / SIDECAR).is_file():
        return out
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / SIDECAR).is_file():
            if out.exists():                  # a folder at this key without its sidecar was
                shutil.rmtree(out)            # cut short outside make_model (which renames
                                              # a whole model into place): made again
            make_model(out, preset_name, seed=seed, device=device, dtype=dtype,
                       progress=progress)
    return out


def _write(path: Path, p: Preset, name: str, seed: int, device: str, dtype: str,
           max_shard_bytes: int, say: Callable[[str], None]) -> None:
    from safetensors.torch import save_file  # lazy: only where a model is written

    t0 = time.monotonic()
    shapes = plan_tensors(p)
    shards = plan_shards(p, dtype, max_shard_bytes)
    files = shard_names(len(shards))
    total = sum(_numel(s) for s in shapes.values())
    say(f"{name}: {total:.3g} parameters ({total:,}), {dtype} on {device}, "
        f"{len(shards)} shard{'s' * (len(shards) != 1)}, seed {seed}")
    done = 0
    for i, (names, file) in enumerate(zip(shards, files), 1):
        tensors = {}
        for n in names:
            tensors[n] = draw(p, n, shapes[n], seed, device, DTYPES[dtype])
            done += tensors[n].numel()
        save_file(tensors, str(path / file), metadata={"format": "pt"})
        del tensors
        say(f"{name}: shard {i}/{len(shards)} written ({file}); {done / total:.0%} of the "
            f"weights in {time.monotonic() - t0:.0f} s")
    if len(shards) > 1:
        (path / "model.safetensors.index.json").write_text(
            json.dumps(index_dict(p, dtype, max_shard_bytes), indent=2) + "\n")
    (path / "config.json").write_text(json.dumps(config_dict(p, dtype), indent=2) + "\n")
    vocab = write_char_tokenizer(path, p.vocab_size, p.max_position_embeddings)
    (path / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": vocab[BOS], "eos_token_id": vocab[EOS]}, indent=2) + "\n")
    head = _write_eagle_head(path / EAGLE_DIR, p, seed, device, dtype)
    say(f"{name}: EAGLE-1 head ({head:,} parameters) written to {EAGLE_DIR}/")
    (path / SIDECAR).write_text(json.dumps(dict(
        random_weights=True, preset=name, seed=seed, device=device, dtype=dtype,
        parameters=total, shape=asdict(p), eagle_head=EAGLE_DIR, eagle_parameters=head,
        made_by="mrbench model make",
        note="random weights: accuracy on this model measures nothing"), indent=2) + "\n")
    say(f"{name}: config, tokenizer and {SIDECAR} written in {time.monotonic() - t0:.0f} s")


def _write_eagle_head(path: Path, p: Preset, seed: int, device: str, dtype: str) -> int:
    """The preset's random EAGLE-1 head in `path` (one file); its parameter count. Each
    tensor is seeded by its name under `eagle/`, so no head tensor repeats a target's."""
    from safetensors.torch import save_file  # lazy: only where a model is written

    path.mkdir()
    shapes = eagle_plan_tensors(p)
    tensors = {n: draw(p, n, s, seed, device, DTYPES[dtype], key=f"{EAGLE_DIR}/{n}")
               for n, s in shapes.items()}
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps(eagle_config_dict(p, dtype), indent=2)
                                      + "\n")
    return sum(_numel(s) for s in shapes.values())


def eagle_head_of(model_dir: str | Path) -> Path | None:
    """The EAGLE head a made model carries (its sidecar's `eagle_head`), or None: the head
    spec decode on that model speculates with when the workload names none."""
    f = Path(model_dir) / SIDECAR
    try:
        rel = json.loads(f.read_text(encoding="utf-8")).get("eagle_head")
    except (OSError, ValueError, AttributeError):
        return None
    head = Path(model_dir) / rel if isinstance(rel, str) and rel else None
    return head if head is not None and (head / "config.json").is_file() else None


def is_random_weights(model_dir: str | Path) -> bool:
    """Whether `model_dir` was made with random weights (its mrbench_model.json says so):
    what it answers measures nothing, only how fast and in what memory it answers."""
    f = Path(model_dir) / SIDECAR
    try:
        return bool(json.loads(f.read_text(encoding="utf-8")).get("random_weights"))
    except (OSError, ValueError, AttributeError):
        return False
