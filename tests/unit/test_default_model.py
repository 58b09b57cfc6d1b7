"""Which model a run measures (harness/run/models.py): on a GPU the vllm target's default is
a real-shape random Llama made once into the model cache; `tiny` is the bundled model; the
CPU, the bundled target and runs across engines keep the bundled default."""
import json

import pytest

from mrbench.harness.run import models
from mrbench.runner_impl.default_model import DEFAULT_MODEL_DIR
from mrbench.runner_impl.model import random_presets


def test_tiny_is_the_bundled_model_and_a_folder_is_taken_as_it_is():
    assert models.resolve("tiny", {"vllm"}, "cuda") == str(DEFAULT_MODEL_DIR)
    assert models.resolve("/m/llama", {"vllm"}, "cuda") == "/m/llama"


@pytest.mark.parametrize("targets,device", [({"vllm"}, "cpu"), ({"bundled"}, "cuda"),
                                            ({"vllm", "bundled"}, "cuda")])
def test_the_bundled_default_stays_off_the_gpu_and_for_other_targets(targets, device):
    assert models.resolve(None, targets, device) is None


def test_the_gpu_default_asks_the_cache_for_the_1b_preset(monkeypatch, tmp_path):
    asked = []
    monkeypatch.setattr(models.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(random_presets, "cached_model",
                        lambda *a, **k: asked.append((a, k)) or tmp_path)
    assert models.resolve(None, {"vllm"}, "cuda:0") == str(tmp_path)
    [(args, kw)] = asked
    assert args == ("llama-1b",) and kw["seed"] == 0 and kw["device"] == "cuda"


def test_a_cached_model_is_made_once_and_reused(tmp_path, monkeypatch):
    made = []
    real = random_presets.make_model
    monkeypatch.setattr(random_presets, "make_model",
                        lambda *a, **k: made.append(a) or real(*a, **k))
    first = random_presets.cached_model("tiny", root=tmp_path)
    assert first == tmp_path / "tiny-seed0-float32-cpu"
    again = random_presets.cached_model("tiny", root=tmp_path)
    assert again == first and len(made) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tiny") and p.is_dir()]
    other = random_presets.cached_model("tiny", seed=1, root=tmp_path)
    assert other.name == "tiny-seed1-float32-cpu" and len(made) == 2


def test_the_cache_folder_is_taken_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MRBENCH_MODEL_CACHE", str(tmp_path / "c"))
    assert random_presets.cache_dir() == tmp_path / "c"


def test_a_made_model_is_described_by_its_shape_and_random_weights(tmp_path):
    d = random_presets.cached_model("tiny", root=tmp_path)
    got = models.describe(d)
    assert got["preset"] == "tiny" and got["random_weights"] is True
    assert got["shape"]["hidden_size"] == 256 and got["parameters"] > 4e6
    bundled = models.describe(None)
    assert bundled["path"] == str(DEFAULT_MODEL_DIR) and "preset" not in bundled
    json.dumps(got)                                      # the manifest writes it as it is
