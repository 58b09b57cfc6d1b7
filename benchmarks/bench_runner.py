"""Throughput and per-step latency of the bundled runners, V2 and V1, in one run.

    python benchmarks/bench_runner.py [--model DIR] [--num-prompts 64] [--max-tokens 64]
        [--k 0] [--method ngram] [--device cpu] [--repeats 3] [--json OUT]

Runs are interleaved (v2, v1, v2, v1, ...) after each engine's own warmup and one
discarded round (first-seen shapes: allocator growth, kernel selection), so drift in
machine load hits both sides alike. Without --model it uses the bundled default model,
or, until that exists, a random-weight Llama of the same shape built in a temp dir.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]      # the checkout, and the test helpers
from mrbench.runner_impl import LLM, RunnerError, SamplingParams  # noqa: E402
from mrbench.runner_impl.default_model import DEFAULT_MODEL_DIR  # noqa: E402
from support.models import tiny_llama  # noqa: E402  (tests/support: not in the wheel)


def resolve_model(arg: str | None) -> tuple[str, str]:
    if arg:
        return arg, arg
    if (DEFAULT_MODEL_DIR / "config.json").exists():
        return str(DEFAULT_MODEL_DIR), "bundled default"
    d = tiny_llama(Path(tempfile.mkdtemp()) / "bench-llama", hidden_size=256,
                   intermediate_size=768, num_hidden_layers=4, num_attention_heads=8,
                   num_key_value_heads=4, max_position_embeddings=1024)
    return str(d), "random-weight Llama (4 layers, hidden 256, GQA 8:4)"


def one_run(llm: LLM, prompts: list[list[int]], sp: SamplingParams) -> dict:
    n0 = len(llm.step_records)
    t0 = time.perf_counter()
    outs = llm.generate(prompts, sp)
    wall = time.perf_counter() - t0
    steps = np.array([(r.t_end - r.t_start) * 1e3 for r in llm.step_records[n0:]])
    toks = sum(len(o.token_ids) for o in outs)
    return dict(wall_s=wall, output_tokens=toks, steps=steps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, nargs=2, default=(16, 128), metavar=("MIN", "MAX"))
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--max-num-seqs", type=int, default=32)
    ap.add_argument("--k", type=int, default=0, help="speculative tokens")
    ap.add_argument("--method", default="ngram", choices=["ngram", "draft"])
    ap.add_argument("--draft-model")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--runners", nargs="+", default=["v2", "v1"])
    ap.add_argument("--json", help="also write the figures to this JSON file")
    a = ap.parse_args()
    try:
        model, model_desc = resolve_model(a.model)
        engines = {r: LLM(model, runner=r, device=a.device, max_num_seqs=a.max_num_seqs,
                          max_num_batched_tokens=1024, num_speculative_tokens=a.k,
                          speculative_method=a.method, draft_model=a.draft_model)
                   for r in a.runners}
    except RunnerError as e:
        print(f"bench_runner: error: {e}", file=sys.stderr)
        return 2
    vocab = engines[a.runners[0]].model_config.vocab_size
    rng = random.Random(0)
    prompts = [[rng.randrange(3, vocab) for _ in range(rng.randint(*a.prompt_len))]
               for _ in range(a.num_prompts)]
    sp = SamplingParams(temperature=0, max_tokens=a.max_tokens, ignore_eos=True)
    for r in a.runners:                      # discarded round
        one_run(engines[r], prompts, sp)
    runs: dict[str, list[dict]] = {r: [] for r in a.runners}
    for _ in range(a.repeats):
        for r in a.runners:
            runs[r].append(one_run(engines[r], prompts, sp))

    print(f"model: {model_desc}; device {a.device}; torch {torch.__version__}; "
          f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")
    print(f"workload: {a.num_prompts} prompts of {a.prompt_len[0]}-{a.prompt_len[1]} tokens, "
          f"{a.max_tokens} output tokens each (greedy, ignore_eos), max_num_seqs "
          f"{a.max_num_seqs}, k={a.k}{' ' + a.method if a.k else ''}, {a.repeats} interleaved repeats")
    print(f"{'runner':<7}{'tok/s (median)':>16}{'wall s':>9}{'steps':>7}"
          f"{'step P50 ms':>13}{'step P99 ms':>13}")
    figures = {}
    for r, rs in runs.items():
        steps = np.concatenate([x["steps"] for x in rs])
        tps = float(np.median([x["output_tokens"] / x["wall_s"] for x in rs]))
        figures[r] = dict(tokens_per_s=tps, wall_s=float(np.median([x["wall_s"] for x in rs])),
                          steps_per_run=len(rs[0]["steps"]),
                          step_p50_ms=float(np.percentile(steps, 50)),
                          step_p99_ms=float(np.percentile(steps, 99)))
        f = figures[r]
        print(f"{r:<7}{tps:>16.1f}{f['wall_s']:>9.2f}{f['steps_per_run']:>7}"
              f"{f['step_p50_ms']:>13.2f}{f['step_p99_ms']:>13.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps(dict(model=model_desc, args=vars(a), figures=figures),
                                           indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
