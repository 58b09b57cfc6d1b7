"""A character-level tokenizer in Hugging Face's tokenizer.json format.

One token per character, so digits are single tokens (arithmetic stays learnable for a
tiny model) and any HF/vLLM tokenizer loader can read it. Ids: <unk>=0, <s>=1, </s>=2,
then printable ASCII and newline, then unused fillers up to vocab_size.
"""
from __future__ import annotations

import json
import string
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, processors

UNK, BOS, EOS = "<unk>", "<s>", "</s>"
CHARS = (" " + string.ascii_lowercase + string.ascii_uppercase + string.digits
         + "\n.,!?'\"-:;()" + "".join(c for c in string.punctuation if c not in ".,!?'\"-:;()"))


def char_vocab(vocab_size: int) -> dict[str, int]:
    if vocab_size < 4:
        raise ValueError(f"vocab_size must be at least 4, got {vocab_size}")
    tokens = [UNK, BOS, EOS] + list(CHARS[: vocab_size - 3])
    tokens += [f"<unused_{i}>" for i in range(vocab_size - len(tokens))]
    return {tok: i for i, tok in enumerate(tokens)}


def write_char_tokenizer(path: str | Path, vocab_size: int, max_length: int) -> dict[str, int]:
    """Write tokenizer.json + tokenizer_config.json; return the vocabulary."""

    path = Path(path)
    vocab = char_vocab(vocab_size)
    # BPE with no merges = one token per character; unknown characters become <unk>.
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (UNK, BOS, EOS)])
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, vocab[BOS])])
    tok.decoder = decoders.Fuse()                 # characters back together, no spaces added
    tok.save(str(path / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
              "unk_token": UNK, "model_max_length": max_length,
              "clean_up_tokenization_spaces": False}
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return vocab
