"""Fixtures shared by every test folder (unit, e2e, gpu, vllm). Helpers live in tests/support."""

import os

import pytest
from support.models import tiny_llama
from support.runner import make_prompts, run

from mrbench.contract import data_dir as data_dir_path


WEEKLY_ENV = "MRBENCH_WEEKLY"


def pytest_collection_modifyitems(config, items):
    """`weekly` tests skip, saying why, unless MRBENCH_WEEKLY=1: each starts several real
    vLLM engines on CPU (one to three minutes on two cores) for a path that a per-push test
    covers in part; ci/weekly.yml runs them. A skip, not a deselection, so every run's
    summary counts what it left out."""
    if os.environ.get(WEEKLY_ENV) == "1":
        return
    skip = pytest.mark.skip(reason=f"weekly: ci/weekly.yml runs it ({WEEKLY_ENV}=1 "
                                   "pytest -m weekly)")
    for item in items:
        if "weekly" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A random-weight 2-layer Llama (GQA 4:2) with a character tokenizer. Seed 3: its
    streams stop early on some prompts (EOS, the stop strings "a" and "e"), which the stop
    tests need; not every seed's weights do."""
    return tiny_llama(tmp_path_factory.mktemp("tiny_llama"), seed=3)


@pytest.fixture(scope="session")
def tiny_draft_model_dir(tmp_path_factory):
    """A smaller model with the same vocabulary/tokenizer, e.g. a speculative-decoding draft."""
    return tiny_llama(
        tmp_path_factory.mktemp("tiny_draft_llama"),
        num_hidden_layers=1,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=2,
        num_key_value_heads=1,
        seed=1,
    )


@pytest.fixture(scope="session")
def prompts64() -> list[list[int]]:
    return make_prompts(64)


@pytest.fixture(scope="session")
def v2_greedy(tiny_model_dir, prompts64) -> list[list[int]]:
    """The reference outputs every parity test compares against."""
    return run(tiny_model_dir, prompts64)


@pytest.fixture(scope="session")
def data_dir():
    """$MRBENCH_DATA_DIR, default ../shared/data next to the repo; skip when absent."""
    d = data_dir_path()
    if not d.is_dir():
        pytest.skip(f"data directory {d} is absent (set MRBENCH_DATA_DIR)")
    return d
