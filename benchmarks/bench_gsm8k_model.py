"""Held-out accuracy and evaluation time of the bundled model through runner_impl V2.

    python benchmarks/bench_gsm8k_model.py --limit 200            # the 60 s target (2 CPU cores)
    python benchmarks/bench_gsm8k_model.py --limit 500 --transformers   # + answer parity with HF

Problems come from `HELD_OUT_SEEDS` (never trained on), 100 per seed, in order. With
`--transformers` every problem is also decoded greedily by `transformers` `generate` on the
same weights and the extracted answers (and full texts) are compared.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mrbench.runner_impl import LLM, SamplingParams  # noqa: E402
from mrbench.runner_impl.default_model import default_model_dir  # noqa: E402
from mrbench.workloads.gsm8k_problems import HELD_OUT_SEEDS, generate  # noqa: E402
from mrbench.workloads.gsm8k_scoring import PROMPT, STOP, score  # noqa: E402

MAX_TOKENS = 320


def held_out(limit: int):
    per_seed = 100
    seeds = HELD_OUT_SEEDS[: (limit + per_seed - 1) // per_seed]
    return [p for s in seeds for p in generate(s, per_seed)][:limit]


def hf_texts(model_dir: Path, prompts: list[str], batch: int = 32) -> list[str]:
    """Greedy transformers generate, left-padded batches, cut at the first stop string."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    out = []
    for i in range(0, len(prompts), batch):
        enc = tok(prompts[i:i + batch], return_tensors="pt", padding=True)
        with torch.no_grad():
            gen = model.generate(**enc, max_new_tokens=MAX_TOKENS, do_sample=False,
                                 pad_token_id=tok.eos_token_id)
        for row in gen[:, enc["input_ids"].shape[1]:]:
            text = tok.decode(row, skip_special_tokens=True)
            cuts = [text.find(s) for s in STOP if s in text]
            out.append(text[:min(cuts)] if cuts else text)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--transformers", action="store_true",
                    help="also decode with transformers and compare answers")
    ap.add_argument("--json", type=Path, help="write the figures here")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    problems = held_out(a.limit)
    prompts = [PROMPT.format(question=p.question) for p in problems]
    model_dir = default_model_dir()

    t0 = time.perf_counter()
    llm = LLM(model=None, runner="v2", device="cpu", max_num_seqs=a.max_num_seqs,
              max_num_batched_tokens=4096)
    load_s = time.perf_counter() - t0
    sp = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, stop=STOP)
    t0 = time.perf_counter()
    outs = llm.generate(prompts, sp)
    eval_s = time.perf_counter() - t0
    scores = [score(o.text, p.answer) for o, p in zip(outs, problems)]
    res = dict(problems=len(problems), threads=a.threads, max_num_seqs=a.max_num_seqs,
               load_s=round(load_s, 2), eval_s=round(eval_s, 2),
               generated_tokens=sum(len(o.token_ids) for o in outs),
               strict=round(sum(s.strict for s in scores) / len(scores), 4),
               flexible=round(sum(s.flexible for s in scores) / len(scores), 4))
    if a.transformers:
        t0 = time.perf_counter()
        ref = hf_texts(model_dir, prompts)
        res["transformers_s"] = round(time.perf_counter() - t0, 2)
        ref_scores = [score(t, p.answer) for t, p in zip(ref, problems)]
        res["transformers_strict"] = round(sum(s.strict for s in ref_scores) / len(ref), 4)
        res["answers_identical"] = sum(s.strict_answer == r.strict_answer
                                       for s, r in zip(scores, ref_scores))
        res["texts_identical"] = sum(o.text == t for o, t in zip(outs, ref))
    print(json.dumps(res, indent=2))
    if a.json:
        a.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
