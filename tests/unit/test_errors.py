"""Bad arguments raise one RunnerError whose message names the problem."""
import json

import pytest

from mrbench.runner_impl import LLM, ModelLoadError, RunnerError, SamplingParams


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
