"""`mrbench model make`: random-weight Llamas at real shapes. The tiny preset is written and
read back by transformers (same seed, same bytes; shards or not, the same tensors); the
real-scale presets' shapes, shards and index are checked without writing their weights."""
import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from mrbench.harness.cli import main
from mrbench.runner_impl.default_model import DEFAULT_MODEL_DIR
from mrbench.runner_impl.model import random_presets as rp


def _make(tmp_path, name, *extra):
    out = tmp_path / name
    assert main(["model", "make", "--preset", "tiny", "--out", str(out), *extra]) == 0
    return out


def test_the_tiny_preset_loads_in_transformers_and_is_marked_random(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    out = _make(tmp_path, "tiny")
    cap = capsys.readouterr()
    assert cap.out.strip() == str(out)
    assert "tiny: 4.75e+06 parameters" in cap.err and "shard 1/1 written" in cap.err
    cfg = transformers.AutoConfig.from_pretrained(out)
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers) == (128, 256, 6)
    assert len(tok) == cfg.vocab_size and tok.decode(tok("12+3=15").input_ids[1:]) == "12+3=15"
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert sum(p.numel() for p in model.parameters()) == rp.param_count(rp.PRESETS["tiny"])
    assert rp.is_random_weights(out) and not rp.is_random_weights(DEFAULT_MODEL_DIR)
    side = json.loads((out / rp.SIDECAR).read_text())
    assert (side["preset"], side["seed"], side["dtype"]) == ("tiny", 0, "float32")


def test_same_seed_same_bytes_another_seed_other_weights(tmp_path):
    a, b = _make(tmp_path, "a", "--seed", "7"), _make(tmp_path, "b", "--seed", "7")
    c = _make(tmp_path, "c", "--seed", "8")
    files = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file())
    assert "eagle/model.safetensors" in files
    for f in files:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    for f in ("model.safetensors", "eagle/model.safetensors"):
        assert (a / f).read_bytes() != (c / f).read_bytes(), f


def test_a_made_model_carries_an_eagle_head_in_vllms_format(tmp_path, capsys):
    """vLLM 0.26's V2 speculates only with heads such as EAGLE's, so a made model carries
    one: the bundled trained head's tensors at the preset's shape (no input norm, no
    embedding, no lm_head: vLLM shares the target's), its own draws, named in the sidecar,
    and used by eagle spec decode on that model when the workload names no head."""
    from mrbench.harness.run.targets.vllm.engine_args import eagle_head
    from mrbench.contract import EngineOptions
    from mrbench.runner_impl.default_model import DEFAULT_EAGLE_DIR
    out = _make(tmp_path, "tiny")
    assert "EAGLE-1 head (917,760 parameters) written to eagle/" in capsys.readouterr().err
    head = rp.eagle_head_of(out)
    assert head == out / "eagle"
    with safe_open(str(DEFAULT_EAGLE_DIR / "model.safetensors"), "pt") as f:
        trained = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    made = load_file(head / "model.safetensors")
    assert {k: tuple(v.shape) for k, v in made.items()} == trained     # tiny: the same shape
    assert rp.eagle_plan_tensors(rp.PRESETS["tiny"]) == trained
    target = load_file(out / "model.safetensors")
    assert not torch.equal(made["layers.0.mlp.up_proj.weight"],
                           target["model.layers.0.mlp.up_proj.weight"])
    cfg = json.loads((head / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 1 and cfg["architectures"] == ["LlamaForCausalLM"]
    assert json.loads((out / rp.SIDECAR).read_text())["eagle_parameters"] == 917_760
    assert eagle_head(out, EngineOptions()) == str(head)
    assert eagle_head(out, EngineOptions(draft_model="/mine")) == "/mine"
    assert eagle_head(tmp_path, EngineOptions()) is None            # nothing made there
    p = rp.PRESETS["llama-1b"]
    t = rp.eagle_plan_tensors(p)
    assert t["fc.weight"] == (2048, 4096) and t["layers.0.self_attn.k_proj.weight"] == (512, 2048)
    assert "layers.0.input_layernorm.weight" not in t


def test_shards_hold_the_same_tensors_with_an_index(tmp_path):
    one = rp.make_model(tmp_path / "one", "tiny", seed=1, dtype="bfloat16")
    many = rp.make_model(tmp_path / "many", "tiny", seed=1, dtype="bfloat16",
                         max_shard_bytes=2_000_000)
    index = json.loads((many / "model.safetensors.index.json").read_text())
    files = sorted({*index["weight_map"].values()})
    assert len(files) > 1 and files == sorted(p.name for p in many.glob("model-*.safetensors"))
    whole = load_file(one / "model.safetensors")
    parts = {k: v for f in files for k, v in load_file(many / f).items()}
    assert set(parts) == set(whole) == set(index["weight_map"])
    assert all(torch.equal(parts[k], whole[k]) for k in whole)
    assert whole["model.embed_tokens.weight"].dtype == torch.bfloat16
    assert index["metadata"]["total_size"] == sum(v.numel() * 2 for v in whole.values())


@pytest.mark.parametrize("preset, params, shards", [("llama-1b", 1_235_814_400, 1),
                                                    ("llama-8b", 8_030_261_248, 5)])
def test_real_scale_presets_have_their_models_shapes(preset, params, shards):
    p = rp.PRESETS[preset]
    assert rp.param_count(p) == params                  # Llama-3.2-1B: 1.24e9; 3.1-8B: 8.03e9
    t = rp.plan_tensors(p)
    h, kv_dim = p.hidden_size, 8 * p.head_dim
    assert t["model.embed_tokens.weight"] == (128256, h)
    assert t["model.layers.0.self_attn.k_proj.weight"] == (kv_dim, h)
    assert t["model.layers.0.mlp.down_proj.weight"] == (h, p.intermediate_size)
    assert ("lm_head.weight" in t) == (preset == "llama-8b")   # 1B ties its embeddings
    index = rp.index_dict(p, "bfloat16")
    names = rp.shard_names(shards)
    assert sorted(set(index["weight_map"].values())) == names
    assert index["metadata"]["total_size"] == params * 2
    sizes = {f: 0 for f in names}
    for n, f in index["weight_map"].items():
        sizes[f] += 2 * torch.Size(t[n]).numel()
    assert max(sizes.values()) <= rp.MAX_SHARD_BYTES
    cfg = rp.config_dict(p, "bfloat16")
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]) == (
        32, 8, h // 32)
    assert cfg["rope_theta"] == 500000.0 and cfg["max_position_embeddings"] == 8192
    assert cfg["intermediate_size"] == (8192 if preset == "llama-1b" else 14336)


def _one_error(capsys, args):
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    return err[0]


def test_bad_make_requests_are_one_line_and_leave_nothing(tmp_path, capsys):
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    assert "not an empty directory" in _one_error(
        capsys, ["model", "make", "--preset", "tiny", "--out", str(full)])
    assert "invalid choice: 'huge'" in _one_error(
        capsys, ["model", "make", "--preset", "huge", "--out", str(tmp_path / "h")])
    assert "--seed" in _one_error(
        capsys, ["model", "make", "--preset", "tiny", "--seed", "x", "--out", str(tmp_path)])
    if not torch.cuda.is_available():
        assert "CUDA is not available" in _one_error(
            capsys, ["model", "make", "--preset", "tiny", "--device", "cuda",
                     "--out", str(tmp_path / "c")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full"]     # no partial folder
    empty = tmp_path / "empty"
    empty.mkdir()                                                    # an empty one is fine
    assert main(["model", "make", "--preset", "tiny", "--out", str(empty)]) == 0
    assert (empty / "config.json").is_file()
