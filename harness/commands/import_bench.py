"""`mrbench import-bench`: vllm bench serve/latency JSON -> a results directory (for
compare, report and history)."""
from __future__ import annotations

import argparse
import json

from ..record.errors import EXIT_PASS
from ..record.results import default_out, read_summary
from ..run.bench_import import import_bench
from .common import render_run


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
