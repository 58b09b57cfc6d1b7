"""The bundled default model (runner_impl/assets/gsm8k-tiny): shipped, loadable everywhere,
and accurate on held-out generated problems. The full 500-problem check and the timing are
benchmarks/bench_gsm8k_model.py; this keeps a slice of both in every CI run."""
import json

import pytest
import torch

from mrbench.runner_impl import LLM, SamplingParams
from mrbench.runner_impl.default_model import DEFAULT_MODEL_DIR, default_model_dir
from mrbench.workloads.gsm8k_problems import HELD_OUT_SEEDS, TRAIN_SEEDS, generate
from mrbench.workloads.gsm8k_scoring import PROMPT, STOP, score

GREEDY = SamplingParams(temperature=0, max_tokens=320, stop=list(STOP))


@pytest.fixture(scope="module")
def held_out():
    return generate(HELD_OUT_SEEDS[0], 48) + generate(HELD_OUT_SEEDS[-1], 16)


@pytest.fixture(scope="module")
def v2_texts(held_out):
    llm = LLM(model=None, runner="v2", max_num_seqs=16)
    return [o.text for o in llm.generate([PROMPT.format(question=p.question) for p in held_out],
                                         GREEDY)]


def test_shipped_files_and_size():
    d = default_model_dir()
    names = {p.name for p in d.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "MODEL_CARD.md",
            "generation_config.json", "training_summary.json"} <= names
    assert sum(p.stat().st_size for p in d.iterdir()) <= 20 * 2**20
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"


def test_model_card_records_the_training_split_and_real_gsm8k():
    card = (DEFAULT_MODEL_DIR / "MODEL_CARD.md").read_text()
    summary = json.loads((DEFAULT_MODEL_DIR / "training_summary.json").read_text())
    assert "TRAIN_SEEDS" in card and "HELD_OUT_SEEDS" in card
    assert TRAIN_SEEDS == tuple(range(1000)) and min(HELD_OUT_SEEDS) > max(TRAIN_SEEDS)
    assert summary["eval"]["held_out"] == 500 and summary["eval"]["strict_accuracy"] >= 0.90
    assert summary["eval"]["real_gsm8k"]["n"] == 1319
    assert "Real GSM8K" in card


def test_held_out_accuracy_through_v2(held_out, v2_texts):
    hits = [score(t, p.answer).strict for t, p in zip(v2_texts, held_out)]
    assert sum(hits) / len(hits) >= 0.90, sum(hits)


def test_v1_gives_the_same_texts(held_out, v2_texts):
    llm = LLM(model=None, runner="v1", max_num_seqs=16)
    texts = [o.text for o in llm.generate(
        [PROMPT.format(question=p.question) for p in held_out[:24]], GREEDY)]
    assert texts == v2_texts[:24]


def test_transformers_gives_the_same_texts(held_out, v2_texts):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d = default_model_dir()
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    for p, ours in zip(held_out[:6], v2_texts):
        enc = tok(PROMPT.format(question=p.question), return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=320, do_sample=False,
                                 pad_token_id=tok.eos_token_id)
        text = tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        cuts = [text.find(s) for s in STOP if s in text]
        assert (text[:min(cuts)] if cuts else text) == ours
