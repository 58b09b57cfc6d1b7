"""Build tiny random-weight Llama directories in HF format, so tests (and smoke runs) need no
downloaded model and can still check our model against transformers."""

from __future__ import annotations

import json
import string
from pathlib import Path

import torch

UNK, BOS, EOS = "<unk>", "<s>", "</s>"

# Characters in the order they get a token; a small vocab keeps the most useful ones.
_CHARS = (
    " "
    + string.ascii_lowercase
    + string.ascii_uppercase
    + string.digits
    + "\n.,!?'\"-:;()"
    + "".join(c for c in string.punctuation if c not in ".,!?'\"-:;()")
)


def tiny_vocab(vocab_size: int) -> dict[str, int]:
    """`<unk>`=0, `<s>`=1, `</s>`=2 (the ids HF's LlamaConfig defaults to), then single characters,
    then `<unused_N>` fillers up to exactly `vocab_size` entries."""
    if vocab_size < 4:
        raise ValueError(f"vocab_size must be at least 4, got {vocab_size}")
    tokens = [UNK, BOS, EOS] + list(_CHARS[: vocab_size - 3])
    tokens += [f"<unused_{i}>" for i in range(vocab_size - len(tokens))]
    return {tok: i for i, tok in enumerate(tokens)}


def _write_tokenizer(path: Path, vocab_size: int, max_length: int) -> None:
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors

    vocab = tiny_vocab(vocab_size)
    # BPE with no merges = one token per character; unknown characters become <unk>.
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (UNK, BOS, EOS)])
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, vocab[BOS])]
    )  # Llama-style: prompts start with BOS
    tok.decoder = decoders.Fuse()  # concatenate characters back, no spaces in between
    tok.save(str(path / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": UNK,
        "model_max_length": max_length,
        "clean_up_tokenization_spaces": False,
    }
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")


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
    import transformers

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    vocab = tiny_vocab(vocab_size)
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
    _write_tokenizer(path, vocab_size, max_position_embeddings)
    return path
