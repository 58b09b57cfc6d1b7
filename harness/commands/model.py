"""`mrbench model make`: a random-weight Llama at a real model's shape, in Hugging Face format,
for the vllm target at real scale without a download (runner_impl/model/random_presets.py
says what is written and why).

Progress goes to stderr one line per shard, also when stderr is not a terminal (a CI log):
an 8B model on a CPU takes minutes, and a silent command looks hung.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mrbench.contract import BadInput

from ..run.targets.bundled.runner_parts import random_presets


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`mrbench model` and its subcommands (`make`)."""
    p = commands.add_parser("model", help="random-weight models at real shapes "
                                          "(`model make --preset llama-8b`)")
    sub = p.add_subparsers(dest="model_cmd", required=True, parser_class=type(p))
    mk = sub.add_parser("make", help="write a random-weight Llama (config, sharded "
                                     "safetensors, a tokenizer vLLM loads) to a new folder")
    mk.add_argument("--preset", required=True, choices=list(random_presets.PRESETS),
                    help="tiny (the bundled test model's shape, 4.75M parameters), "
                         "llama-1b (Llama-3.2-1B's shape), llama-8b (Llama-3.1-8B's shape); "
                         "context capped at 8192")
    mk.add_argument("--out", type=Path, required=True,
                    help="folder to write (must not exist, or be empty)")
    mk.add_argument("--seed", type=int, default=0, help="weights' seed (default 0)")
    mk.add_argument("--device", choices=list(random_presets.DEVICES), default="cpu",
                    help="where the weights are drawn (cuda: the GPU draws them; default cpu)")
    mk.add_argument("--dtype", choices=list(random_presets.DTYPES), default=None,
                    help="weights' dtype (default: float32 for tiny, bfloat16 otherwise)")
    return p


def main(a: argparse.Namespace) -> int:
    if a.model_cmd != "make":                    # argparse allows only make; say so anyway
        raise BadInput(f"model {a.model_cmd}: unknown subcommand")

    def say(line: str) -> None:
        print(f"[mrbench model] {line}", file=sys.stderr, flush=True)
    try:
        out = random_presets.make_model(a.out, a.preset, seed=a.seed, device=a.device,
                                        dtype=a.dtype, progress=say)
    except ValueError as e:
        raise BadInput(f"model make: {e}") from None
    except OSError as e:
        raise BadInput(f"model make: cannot write {a.out}: {e.strerror or e}") from None
    print(out)
    return 0
