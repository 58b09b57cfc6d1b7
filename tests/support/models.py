"""Small random-weight Llamas for tests, made by the one maker (`random_presets.write_model`)."""
from dataclasses import replace
from pathlib import Path

from mrbench.runner_impl.model.random_presets import Preset, write_model

# 2 layers, GQA 4:2, head_dim 16, N(0, 0.2) weights: logits far from uniform, so a wrong
# mask or RoPE shows as a clear mismatch
TINY_TEST_SHAPE = Preset(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128, vocab_size=96,
                         max_position_embeddings=512, tie_word_embeddings=False,
                         rope_theta=10000.0, init_std=0.2, dtype="float32")


def tiny_llama(path: Path, *, seed: int = 0, **shape) -> Path:
    """TINY_TEST_SHAPE with `shape`'s fields changed, written to `path` (missing or empty)."""
    return write_model(path, replace(TINY_TEST_SHAPE, **shape), name="test", seed=seed)
