"""`mrbench run`: the suite on baseline and candidate, gated; the report from the final
results directory."""
from __future__ import annotations

import argparse

from ..orchestrate import run_suite
from ..results import default_out
from .common import isolation_of, print_summary, render_run, suite_and_sides


def main(a: argparse.Namespace) -> int:
    suite, base, cand, overrides = suite_and_sides(a, tuple(a.fault))
    out = a.out or default_out(suite.name)
    summary, code, path = run_suite(suite, base, cand, overrides, out,
                                    save_reference=a.save_reference, isolation=isolation_of(a))
    render_run(path)
    print_summary(summary, path, a.json)
    if a.save_reference and not a.json:
        print("references: " + ("not saved (a side failed)" if summary["failures"] else
                                "saved under results/baselines/op-counts/"))
    return code
