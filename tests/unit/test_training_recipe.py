"""The training recipe runs end to end (tiny settings): trains, saves an HF directory that
runner_impl and transformers both load, evaluates, and writes the model card."""
import json
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def test_recipe_smoke(tmp_path):
    out = tmp_path / "model"
    overrides = ["data.train_problems=600", "train.steps=100000", "train.batch_size=8",
                 "train.warmup_steps=3", "model.num_hidden_layers=1", "model.hidden_size=32",
                 "model.intermediate_size=64", "model.num_attention_heads=2",
                 "model.num_key_value_heads=1", "eval.held_out_seeds=1",
                 "eval.problems_per_seed=8", "eval.real_gsm8k_limit=4", "eval.max_tokens=16"]
    budget = ["--time-budget-s", "3"]        # the recipe must stop on time and still save
    r = subprocess.run([sys.executable, str(ROOT / "training" / "train_tiny_gsm8k.py"),
                        "--device", "cpu", "--out", str(out), *budget, "--set", *overrides],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((out / "training_summary.json").read_text())
    assert summary["train"]["train_examples"] == 600
    assert 0 < summary["train"]["steps"] < 100000     # the budget, not the step count, stopped it
    assert summary["eval"]["held_out"] == 8
    assert "## Accuracy" in (out / "MODEL_CARD.md").read_text()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mrbench.runner_impl import LLM, SamplingParams
    hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(out)
    prompt = "Question: Ann has 3 cats and 4 dogs. How many pets?\nAnswer:"
    ids = tok(prompt)["input_ids"]
    ours = LLM(out).generate([prompt], SamplingParams(temperature=0, max_tokens=12,
                                                      ignore_eos=True))[0]
    assert ours.prompt_token_ids == ids
    theirs = hf.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False,
                         eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
    assert ours.token_ids == theirs
