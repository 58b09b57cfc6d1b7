"""The model's configuration: the subset of a Hugging Face Llama config.json this model
implements, validated so that anything it would silently get wrong (biases, scaled RoPE,
other activations, odd head sizes) is refused with the field's name instead of producing
wrong logits."""

from __future__ import annotations

from dataclasses import dataclass

from mrbench.runner_impl.errors import ModelLoadError

# Fields a config.json must carry; everything else has a sensible Llama default.
_REQUIRED_FIELDS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "rms_norm_eps",
    "max_position_embeddings",
)


def _positive_int(d: dict, name: str, default: int | None = None) -> int:
    value = d.get(name, default)
    if value is None:
        raise ModelLoadError(f"missing required field {name!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelLoadError(f"field {name!r} must be a positive integer, got {value!r}")
    return value


def _token_ids(name: str, value: object) -> tuple[int, ...]:
    """HF writes eos_token_id as an int or a list of ints; keep a tuple either way."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in items):
        raise ModelLoadError(f"field {name!r} must be a token id or a list of token ids, got {value!r}")
    return tuple(items)


@dataclass(frozen=True)
class LlamaConfig:
    """The subset of a HF Llama config.json that this model implements."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    bos_token_id: int | None = None
    eos_token_id: tuple[int, ...] = ()

    @classmethod
    def from_hf_dict(cls, d: dict) -> LlamaConfig:
        """Validate a parsed config.json, refusing anything this model would silently get wrong
        (biases, scaled RoPE, other activations) rather than producing wrong logits."""
        if not isinstance(d, dict):
            raise ModelLoadError(f"config must be a JSON object, got {type(d).__name__}")
        model_type = d.get("model_type")
        architectures = d.get("architectures")
        if model_type is None and not architectures:
            raise ModelLoadError("missing required field 'model_type'")
        if model_type is not None and model_type != "llama":
            raise ModelLoadError(f"unsupported model_type {model_type!r} (expected 'llama')")
        if architectures is not None and (
            not isinstance(architectures, list) or "LlamaForCausalLM" not in architectures
        ):
            raise ModelLoadError(f"unsupported architectures {architectures!r} (expected LlamaForCausalLM)")
        for flag in ("attention_bias", "mlp_bias"):
            if d.get(flag, False):
                raise ModelLoadError(f"field {flag!r} is true; biased projections are not supported")
        hidden_act = d.get("hidden_act", "silu")
        if hidden_act != "silu":
            raise ModelLoadError(f"unsupported hidden_act {hidden_act!r} (expected 'silu')")

        # RoPE: transformers 5.x nests it in rope_parameters, older files use rope_theta + rope_scaling.
        rope_parameters = d.get("rope_parameters") or {}
        for field in ("rope_parameters", "rope_scaling"):
            params = d.get(field)
            if params is None:
                continue
            if not isinstance(params, dict):
                raise ModelLoadError(f"field {field!r} must be an object, got {params!r}")
            rope_type = params.get("rope_type", params.get("type", "default"))
            if rope_type not in (None, "default", "none"):
                raise ModelLoadError(f"unsupported {field} rope_type {rope_type!r} (only default RoPE)")
        rope_theta = d.get("rope_theta", rope_parameters.get("rope_theta", 10000.0))
        if isinstance(rope_theta, bool) or not isinstance(rope_theta, (int, float)) or rope_theta <= 0:
            raise ModelLoadError(f"field 'rope_theta' must be a positive number, got {rope_theta!r}")

        for name in _REQUIRED_FIELDS:
            if name not in d:
                raise ModelLoadError(f"missing required field {name!r}")
        eps = d["rms_norm_eps"]
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps <= 0:
            raise ModelLoadError(f"field 'rms_norm_eps' must be a positive number, got {eps!r}")

        num_heads = _positive_int(d, "num_attention_heads")
        hidden_size = _positive_int(d, "hidden_size")
        num_kv_heads = _positive_int(d, "num_key_value_heads", num_heads)
        if num_heads % num_kv_heads:
            raise ModelLoadError(
                f"num_attention_heads ({num_heads}) is not a multiple of num_key_value_heads ({num_kv_heads})"
            )
        head_dim = _positive_int(d, "head_dim", hidden_size // num_heads or None)
        if head_dim % 2:
            raise ModelLoadError(f"field 'head_dim' must be even for RoPE, got {head_dim}")
        bos = d.get("bos_token_id")
        return cls(
            vocab_size=_positive_int(d, "vocab_size"),
            hidden_size=hidden_size,
            intermediate_size=_positive_int(d, "intermediate_size"),
            num_hidden_layers=_positive_int(d, "num_hidden_layers"),
            num_attention_heads=num_heads,
            num_key_value_heads=num_kv_heads,
            head_dim=head_dim,
            rms_norm_eps=float(eps),
            rope_theta=float(rope_theta),
            max_position_embeddings=_positive_int(d, "max_position_embeddings"),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            bos_token_id=_token_ids("bos_token_id", bos)[0] if bos is not None else None,
            eos_token_id=_token_ids("eos_token_id", d.get("eos_token_id")),
        )
