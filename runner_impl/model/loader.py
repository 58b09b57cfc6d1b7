"""Load a HF-format Llama directory (config.json, safetensors, tokenizer.json).

Every problem with the directory becomes one ModelLoadError line naming the path and what is
wrong, so the CLI can print it as-is instead of a stack trace from deep inside a library.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from tokenizers import Tokenizer as HFTokenizer

from mrbench.runner_impl.errors import ModelLoadError
from mrbench.runner_impl.model.config import LlamaConfig
from mrbench.runner_impl.model.llama import LlamaForCausalLM

SINGLE_WEIGHTS = "model.safetensors"
SHARDED_INDEX = "model.safetensors.index.json"


def _model_dir(model_dir: str | Path) -> Path:
    path = Path(model_dir)
    if not path.exists():
        raise ModelLoadError(f"model dir {path}: does not exist")
    if not path.is_dir():
        raise ModelLoadError(f"model dir {path}: is not a directory")
    return path


def _read_json(path: Path, what: str, required: bool = True) -> dict | None:
    """Parse a JSON object file; None if it is optional and absent."""
    if not path.is_file():
        if required:
            raise ModelLoadError(f"model dir {path.parent}: {what} not found")
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ModelLoadError(f"model dir {path.parent}: {what} is not valid JSON (line {e.lineno})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"model dir {path.parent}: {what} could not be read ({e})") from None
    if not isinstance(data, dict):
        raise ModelLoadError(f"model dir {path.parent}: {what} must hold a JSON object")
    return data


def load_config(model_dir: str | Path) -> LlamaConfig:
    """Parse and validate `config.json`."""
    path = _model_dir(model_dir)
    data = _read_json(path / "config.json", "config.json")
    try:
        return LlamaConfig.from_hf_dict(data)
    except ModelLoadError as e:
        raise ModelLoadError(f"model dir {path}: config.json: {e}") from None


class _SafetensorsWeights(Mapping[str, torch.Tensor]):
    """A lazy name -> tensor view over one or more open safetensors files, so a sharded model is
    never held twice in memory: each tensor is read only when load_weights copies it."""

    def __init__(self, handles: dict[str, object]) -> None:
        self._handles = handles  # tensor name -> open safe_open handle

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._handles[name].get_tensor(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._handles)

    def __len__(self) -> int:
        return len(self._handles)


def _weight_files(path: Path) -> list[Path]:
    """The safetensors files making up the checkpoint, single-file or sharded."""
    if (path / SINGLE_WEIGHTS).is_file():
        return [path / SINGLE_WEIGHTS]
    index = _read_json(path / SHARDED_INDEX, SHARDED_INDEX, required=False)
    if index is None:
        other = [n for n in ("pytorch_model.bin", "pytorch_model.bin.index.json") if (path / n).exists()]
        hint = f" (found {other[0]}, which is not supported)" if other else ""
        raise ModelLoadError(f"model dir {path}: no weights: expected {SINGLE_WEIGHTS} or {SHARDED_INDEX}{hint}")
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelLoadError(f"model dir {path}: {SHARDED_INDEX} has no 'weight_map' object")
    shards = sorted(set(weight_map.values()))
    for shard in shards:
        if not isinstance(shard, str) or not (path / shard).is_file():
            raise ModelLoadError(f"model dir {path}: shard {shard!r} named in {SHARDED_INDEX} not found")
    return [path / s for s in shards]


def _open_weights(stack: ExitStack, path: Path, file: Path) -> tuple[object, list[str]]:
    """(an open safetensors handle, its tensor names); opening reads and checks the header
    against the file's size (a truncated shard fails here), no tensor is read."""
    try:
        handle = stack.enter_context(safe_open(str(file), framework="pt", device="cpu"))
        return handle, list(handle.keys())
    except (SafetensorError, OSError) as e:
        raise ModelLoadError(
            f"model dir {path}: {file.name} is not a readable safetensors file ({e})"
        ) from None


def check_weights(model_dir: str | Path) -> None:
    """Every weight file of the directory is there and opens as safetensors, read no
    further than its header: a missing or truncated shard is one line before an engine
    starts, not a failed start after the model's load (seconds to minutes) on each side."""
    path = _model_dir(model_dir)
    for file in _weight_files(path):
        with ExitStack() as stack:
            _open_weights(stack, path, file)


def load_model(
    model_dir: str | Path, dtype: torch.dtype, device: str | torch.device
) -> tuple[LlamaForCausalLM, LlamaConfig]:
    """Build the model on `device` in `dtype` and fill it from the directory's safetensors."""
    path = _model_dir(model_dir)
    config = load_config(path)
    files = _weight_files(path)
    model = LlamaForCausalLM(config, dtype=dtype, device=device)
    with ExitStack() as stack:
        handles: dict[str, object] = {}
        for file in files:
            handle, names = _open_weights(stack, path, file)
            for name in names:
                if name in handles:
                    raise ModelLoadError(f"model dir {path}: tensor {name!r} appears in more than one shard")
                handles[name] = handle
        try:
            model.load_weights(_SafetensorsWeights(handles))
        except ModelLoadError as e:
            raise ModelLoadError(f"model dir {path}: {e}") from None
    model.eval()
    return model, config


class Tokenizer:
    """A `tokenizers.Tokenizer` plus the stop tokens generation needs."""

    def __init__(self, inner: object, eos_token_ids: tuple[int, ...], bos_token_id: int | None = None) -> None:
        self._inner = inner
        self.eos_token_ids = eos_token_ids
        self.bos_token_id = bos_token_id

    @property
    def vocab_size(self) -> int:
        return self._inner.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """Token ids for `text`; special tokens (e.g. BOS) only where tokenizer.json's
        post-processor adds them, so prompts match what the model was trained on."""
        return self._inner.encode(text, add_special_tokens=True).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._inner.decode(list(ids), skip_special_tokens=skip_special_tokens)


def load_tokenizer(model_dir: str | Path) -> Tokenizer:
    """Load tokenizer.json; stop tokens come from generation_config.json (what HF generate uses),
    falling back to config.json."""

    path = _model_dir(model_dir)
    file = path / "tokenizer.json"
    if not file.is_file():
        raise ModelLoadError(f"model dir {path}: tokenizer.json not found")
    try:
        inner = HFTokenizer.from_file(str(file))
    except Exception as e:  # tokenizers raises a bare Exception for malformed files
        first_line = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelLoadError(f"model dir {path}: tokenizer.json could not be parsed ({first_line})") from None

    config = _read_json(path / "config.json", "config.json", required=False) or {}
    generation = _read_json(path / "generation_config.json", "generation_config.json", required=False) or {}
    source = "generation_config.json" if "eos_token_id" in generation else "config.json"
    eos = generation["eos_token_id"] if "eos_token_id" in generation else config.get("eos_token_id")
    eos_ids = eos if isinstance(eos, list) else [] if eos is None else [eos]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in eos_ids):
        raise ModelLoadError(
            f"model dir {path}: {source}: eos_token_id must be a token id or a list of them, got {eos!r}"
        )
    bos = generation.get("bos_token_id", config.get("bos_token_id"))
    return Tokenizer(inner, tuple(eos_ids), bos if isinstance(bos, int) else None)
