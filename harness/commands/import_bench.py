"""`mrbench import-bench`: vllm bench serve/latency JSON -> a results directory (for
compare, report and history)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..record.errors import EXIT_PASS
from ..record.results import default_out, read_summary
from .common import render_run
from .vllm_bench import import_bench


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`mrbench import-bench` and its options."""
    ib = sub.add_parser("import-bench", help="vllm bench serve/latency JSON -> a results "
                        "directory (for compare, report, history)")
    ib.add_argument("files", nargs="+", type=Path, metavar="FILE.json",
                    help="one or more result files of one setup (pooled)")
    ib.add_argument("--out", type=Path, help="results directory (default results/<time>-...)")
    ib.add_argument("--side", default="candidate", choices=["candidate", "baseline"],
                    help="the side the data is stored as (default candidate, what compare reads)")
    ib.add_argument("--label", help="name of the run (default: vLLM's label, else file name)")
    ib.add_argument("--json", action="store_true")
    return ib


def main(a: argparse.Namespace) -> int:
    path = import_bench(a.files, a.out or default_out("vllm-bench"), side=a.side,
                        label=a.label)
    render_run(path)
    if a.json:
        imported = read_summary(path).imported
        print(json.dumps(dict(run=str(path), **imported.to_json_dict()), indent=2))
    else:
        print(path)
    return EXIT_PASS
