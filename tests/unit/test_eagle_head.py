"""The EAGLE-1 head shipped for the bundled model (runner_impl/assets/gsm8k-tiny-eagle).

It is what vLLM's Model Runner V2 speculates with on the bundled model, so its files must be
what vLLM 0.26's `EagleLlamaForCausalLM` loads (names, shapes, no own embedding or lm_head:
vLLM shares the target's), and it must draft well enough that spec decode means something:
measured here with the recipe's own reference drafter on held-out problems."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from mrbench.runner_impl.default_model import default_eagle_dir, default_model_dir
from mrbench.workloads.gsm8k_problems import HELD_OUT_SEEDS, TRAIN_SEEDS

ROOT = Path(__file__).resolve().parents[2]


def _recipe():
    spec = importlib.util.spec_from_file_location(
        "train_eagle_head", ROOT / "training" / "train_eagle_head.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_head_is_in_vllms_eagle_format():
    head, target = default_eagle_dir(), default_model_dir()
    cfg = json.loads((head / "config.json").read_text())
    tcfg = json.loads((target / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 1 and cfg["architectures"] == ["LlamaForCausalLM"]
    for k in ("hidden_size", "intermediate_size", "num_attention_heads",
              "num_key_value_heads", "head_dim", "vocab_size"):
        assert cfg[k] == tcfg[k], k
    h, i, kv = tcfg["hidden_size"], tcfg["intermediate_size"], \
        tcfg["num_key_value_heads"] * tcfg["head_dim"]
    want = {"fc.weight": (h, 2 * h),
            "layers.0.self_attn.q_proj.weight": (h, h),
            "layers.0.self_attn.k_proj.weight": (kv, h),
            "layers.0.self_attn.v_proj.weight": (kv, h),
            "layers.0.self_attn.o_proj.weight": (h, h),
            "layers.0.mlp.gate_proj.weight": (i, h),
            "layers.0.mlp.up_proj.weight": (i, h),
            "layers.0.mlp.down_proj.weight": (h, i),
            "layers.0.post_attention_layernorm.weight": (h,)}
    with safe_open(str(head / "model.safetensors"), "pt") as f:
        got = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        assert all(f.get_tensor(k).dtype == torch.bfloat16 for k in f.keys())
    assert got == want          # no input_layernorm, no embed_tokens / lm_head (shared)


def test_the_head_drafts_what_the_target_says_on_held_out_problems():
    rec = _recipe()
    target = rec.load_target(default_model_dir())
    head = rec.load_head(default_eagle_dir(), target.config)
    pairs = rec.greedy_sequences(rec.evaluation_seeds(1), 3, 200)
    r = rec.acceptance(head, target, pairs, k=2)
    assert r["verify_steps"] > 50
    assert r["mean_acceptance_length"] > 1.6            # > 0.6 accepted drafts per step
    assert r["acceptance_rate_per_pos"][0] > 0.5
    assert r["acceptance_rate_per_pos"][0] >= r["acceptance_rate_per_pos"][1]


def test_training_and_evaluation_seeds_never_mix():
    rec = _recipe()
    assert set(rec.training_seeds(len(TRAIN_SEEDS))).isdisjoint(HELD_OUT_SEEDS)
    with pytest.raises(ValueError, match="training seed"):
        rec.check_split(TRAIN_SEEDS[0])
    assert set(rec.evaluation_seeds(3)) <= set(HELD_OUT_SEEDS)


def test_the_recipe_runs_end_to_end_and_writes_a_loadable_head(tmp_path):
    """Tiny settings: trains, saves in vLLM's format, evaluates, writes the card."""
    cfg = tmp_path / "tiny.yaml"
    text = (ROOT / "training" / "eagle_head.yaml").read_text()
    for a, b in (("seeds: 100 ", "seeds: 1 "), ("per_seed: 40 ", "per_seed: 6 "),
                 ("steps: 800 ", "steps: 4 "), ("batch_size: 32 ", "batch_size: 4 "),
                 ("per_seed: 32", "per_seed: 1"), ("seeds: 2 ", "seeds: 1 ")):
        assert a in text, a
        text = text.replace(a, b)
    cfg.write_text(text)
    out = tmp_path / "head"
    r = subprocess.run([sys.executable, str(ROOT / "training" / "train_eagle_head.py"),
                        "--config", str(cfg), "--out", str(out)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((out / "training_summary.json").read_text())
    assert summary["train"]["steps"] == 4 and summary["train"]["train_sequences"] == 6
    assert [x["k"] for x in summary["eval"]["results"]] == [2, 4]
    assert "## Acceptance" in (out / "MODEL_CARD.md").read_text()
    rec = _recipe()
    rec.load_head(out, rec.load_target(default_model_dir()).config)
