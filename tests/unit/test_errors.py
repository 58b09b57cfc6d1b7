"""Bad arguments raise one RunnerError whose message names the problem."""
import json
import os
import shutil

import pytest

from mrbench.runner_impl import LLM, ModelLoadError, RunnerError, SamplingParams
from mrbench.runner_impl.default_model import DEFAULT_MODEL_DIR
from mrbench.runner_impl.engine import core
from mrbench.runner_impl.model.loader import check_weights


@pytest.mark.parametrize("kwargs,needle", [
    (dict(faults=["no-such-fault"]), "unknown fault 'no-such-fault'"),
    (dict(num_speculative_tokens=-1), "num_speculative_tokens must be >= 0"),
    (dict(runner="v3"), "runner must be one of"),
    (dict(speculative_method="eagle"), "speculative_method must be one of"),
    (dict(max_num_seqs=0), "max_num_seqs must be >= 1"),
    (dict(num_speculative_tokens=2, speculative_method="draft"), "needs draft_model"),
    (dict(runner="v1", faults=["seq-lens-sync"]), "only in the v2 runner"),
    (dict(device="tpu"), "device must be"),
    (dict(max_model_len=100000), "exceeds the model's max_position_embeddings"),
    (dict(dtype="int8"), "dtype must be"),
    (dict(no_such_arg=1), "unknown LLM argument 'no_such_arg'"),
])
def test_bad_engine_arguments(tiny_model_dir, kwargs, needle):
    with pytest.raises(RunnerError, match=needle.replace("(", r"\(")):
        LLM(tiny_model_dir, **kwargs)


def test_prompt_longer_than_max_model_len(tiny_model_dir):
    llm = LLM(tiny_model_dir, max_model_len=32)
    with pytest.raises(RunnerError, match="prompt has 40 tokens; max_model_len is 32"):
        llm.generate([[5] * 40], SamplingParams(max_tokens=4))
    with pytest.raises(RunnerError, match="empty prompt"):
        llm.generate([[]], SamplingParams(max_tokens=4))
    with pytest.raises(RunnerError, match="out of range"):
        llm.generate([[5, 10_000]], SamplingParams(max_tokens=4))


@pytest.mark.parametrize("kwargs,needle", [
    (dict(temperature=-1), "temperature must be >= 0"),
    (dict(top_p=0), "top_p must be in"),
    (dict(top_k=-2), "top_k must be 0 or -1 \\(off\\) or >= 1"),
    (dict(max_tokens=0), "max_tokens must be >= 1"),
])
def test_bad_sampling_params(kwargs, needle):
    with pytest.raises(RunnerError, match=needle):
        SamplingParams(**kwargs)


def test_missing_model_dir(tmp_path):
    with pytest.raises(RunnerError, match="does not exist"):
        LLM(tmp_path / "nope")


def test_malformed_model_dir(tmp_path, tiny_model_dir):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="config.json"):
        LLM(bad)
    cfg = json.loads((tiny_model_dir / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="safetensors"):
        LLM(bad)                                   # no weights


def test_error_is_one_line(tmp_path):
    with pytest.raises(RunnerError) as e:
        LLM(faults=["bogus"])
    assert "\n" not in str(e.value)


def test_a_kv_cache_larger_than_the_free_memory_is_refused_before_it_is_made(monkeypatch):
    """The engine asks what is free before it makes its block tables and KV tensors, and
    says in one line what it asked for, what was free and which argument sized it."""
    made = []
    monkeypatch.setattr(core, "available_bytes", lambda device: 1 << 20)       # 1 MiB free
    monkeypatch.setattr(core, "allocate_kv_cache", lambda *a: made.append(a))
    with pytest.raises(RunnerError) as e:                  # bundled model: 4 x 32 blocks
        LLM(runner="v1", max_num_seqs=4)
    assert str(e.value) == ("KV cache of 128 blocks x 16 tokens needs 12.0 MiB but 1.0 MiB of "
                            "cpu memory is available: lower max_num_seqs 4 (the cache holds "
                            "that many requests at full length)")
    with pytest.raises(RunnerError, match="lower num_kv_blocks$"):
        LLM(runner="v1", num_kv_blocks=64)
    assert not made


def test_a_truncated_weight_file_is_refused_from_its_header(tmp_path):
    """check_weights reads each weight file's header only: a file cut short is one line
    naming it (what the bundled target checks before any engine starts)."""
    model = tmp_path / "m"
    shutil.copytree(DEFAULT_MODEL_DIR, model)
    check_weights(model)                                     # whole: no complaint
    weights = model / "model.safetensors"
    os.truncate(weights, weights.stat().st_size - 1)
    with pytest.raises(ModelLoadError) as e:
        check_weights(model)
    assert str(e.value).startswith(f"model dir {model}: model.safetensors is not a readable "
                                   "safetensors file (")
    assert "\n" not in str(e.value)
