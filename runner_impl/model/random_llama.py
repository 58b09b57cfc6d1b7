"""Random-weight Llama directories in Hugging Face format (config, safetensors, the character
tokenizer, generation config), so that tests, probes and smoke runs need no downloaded model
and can still check the bundled model against transformers. Needs transformers (the `hf`
extra), imported only when a model is made."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .char_tokenizer import BOS, EOS, char_vocab, write_char_tokenizer


def make_tiny_llama(
    path: str | Path,
    *,
    vocab_size: int = 96,
    hidden_size: int = 64,
    intermediate_size: int = 128,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    max_position_embeddings: int = 512,
    seed: int = 0,
    init_std: float = 0.2,
    tie_word_embeddings: bool = False,
) -> Path:
    """Write a random Llama (config, safetensors, tokenizer, generation config) to `path`.

    Weights are drawn from N(0, init_std) rather than HF's tiny default init so the logits are
    far from uniform and a wrong mask or RoPE shows up as a clear mismatch. Same seed, same bytes.
    """
    import transformers  # lazy: the `hf` extra, only to write a model

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    vocab = char_vocab(vocab_size)
    config = transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=vocab[BOS],
        eos_token_id=vocab[EOS],
        pad_token_id=None,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).to(torch.float32)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():  # tied weights are listed once
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.normal_(0.0, init_std, generator=gen)
    model.save_pretrained(path, safe_serialization=True)
    generation_config = {"bos_token_id": vocab[BOS], "eos_token_id": vocab[EOS]}
    (path / "generation_config.json").write_text(json.dumps(generation_config, indent=2) + "\n")
    write_char_tokenizer(path, vocab_size, max_position_embeddings)
    return path
