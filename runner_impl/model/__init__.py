"""The Llama model, its paged KV cache and the loaders for HF-format model directories."""

from mrbench.runner_impl.model.config import LlamaConfig
from mrbench.runner_impl.model.llama import (
    AttentionMetadata,
    LlamaForCausalLM,
    allocate_kv_cache,
)
from mrbench.runner_impl.model.loader import Tokenizer, load_model, load_tokenizer

__all__ = [
    "AttentionMetadata",
    "LlamaConfig",
    "LlamaForCausalLM",
    "Tokenizer",
    "allocate_kv_cache",
    "load_model",
    "load_tokenizer",
]
