import pytest

from mrbench.runner_impl.testing import make_tiny_llama


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A random-weight 2-layer Llama (GQA 4:2) with a character tokenizer."""
    return make_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))


@pytest.fixture(scope="session")
def tiny_draft_model_dir(tmp_path_factory):
    """A smaller model with the same vocabulary/tokenizer, e.g. a speculative-decoding draft."""
    return make_tiny_llama(
        tmp_path_factory.mktemp("tiny_draft_llama"),
        num_hidden_layers=1,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=2,
        num_key_value_heads=1,
        seed=1,
    )


# ---- shared workload for the runner tests ----------------------------------------------
import random  # noqa: E402

from mrbench.runner_impl import LLM, SamplingParams  # noqa: E402

# Small enough to force slot reuse (max_num_seqs) and chunked prefill (token budget).
# float64: a random-weight model has near-ties (top-2 gaps ~1e-6) that float32 batch shapes
# can flip; parity must test the runner logic, not rounding. test_model.py covers float32.
RUNNER_KW = dict(max_num_seqs=4, max_num_batched_tokens=24, block_size=8, max_model_len=256,
                 dtype="float64")
GREEDY = SamplingParams(temperature=0.0, max_tokens=24)


def make_prompts(n: int, seed: int = 0, lo: int = 3, hi: int = 100) -> list[list[int]]:
    """Token-id prompts of mixed lengths; ids avoid the special tokens 0..2."""
    rng = random.Random(seed)
    return [[rng.randrange(3, 96) for _ in range(rng.randrange(lo, hi))] for _ in range(n)]


@pytest.fixture(scope="session")
def prompts64() -> list[list[int]]:
    return make_prompts(64)


def run(model_dir, prompts, params=GREEDY, **kw) -> list[list[int]]:
    """Token ids of each prompt's output."""
    llm = LLM(model_dir, **{**RUNNER_KW, **kw})
    return [o.token_ids for o in llm.generate(prompts, params)]


@pytest.fixture(scope="session")
def v2_greedy(tiny_model_dir, prompts64) -> list[list[int]]:
    """The reference outputs every parity test compares against."""
    return run(tiny_model_dir, prompts64)


@pytest.fixture(scope="session")
def data_dir():
    """$MRBENCH_DATA_DIR, default ../shared/data next to the repo; skip when absent."""
    import os
    from pathlib import Path
    d = Path(os.environ.get("MRBENCH_DATA_DIR",
                            Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    if not d.is_dir():
        pytest.skip(f"data directory {d} is absent (set MRBENCH_DATA_DIR)")
    return d
