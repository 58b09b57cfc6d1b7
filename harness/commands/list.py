"""`mrbench list`: the workloads, suites, targets and faults this mrbench knows."""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from mrbench.workloads import workloads

from ..record.errors import EXIT_PASS
from ..record.suite import load_suite, shipped_suites
from ..run.targets.base import TARGETS
from ..run.targets.bundled.runner_parts import COVERAGE_FAULTS, FAULTS
from ..run.faults import FaultKind, of_target
from ..run.targets.vllm.faults import FAULTS as VLLM_FAULTS


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`mrbench list` and its options."""
    ls = sub.add_parser("list", help="workloads, suites, targets and faults")
    ls.add_argument("--json", action="store_true")
    return ls


def main(a: argparse.Namespace) -> int:
    info = dict(
        workloads={n: w.description for n, w in workloads().items()},
        suites={n: load_suite(n).description for n in shipped_suites()},
        targets={n: f().info() for n, f in TARGETS.items()},
        faults={n: asdict(f) for n, f in FAULTS.items()},
        coverage_faults={n: asdict(f) for n, f in COVERAGE_FAULTS.items()})
    if a.json:
        print(json.dumps(info, indent=2, default=str))
        return EXIT_PASS
    for section in ("workloads", "suites"):
        print(f"{section}:")
        for n, d in info[section].items():
            print(f"  {n:<12} {d}")
    print("targets:")
    for n, d in info["targets"].items():
        print(f"  {n:<12} runners: {', '.join(d['runners'])}; faults: "
              f"{', '.join(d.get('faults') or []) or 'none'}"
              + (f"; {d['notes']}" if d.get("notes") else ""))
    print("bundled faults (apply to the candidate with --fault NAME):")
    for n, f in info["faults"].items():
        print(f"  {n:<24} vLLM PR {f['vllm_pr']}: {f['bug_class']}")
    print("bundled coverage faults (later MRv2 bugs; not in the default matrix):")
    for n, f in info["coverage_faults"].items():
        print(f"  {n:<24} vLLM PR {f['vllm_pr']}: {f['bug_class']}")
    print("vllm faults (--target vllm --candidate v2 --fault NAME; the vLLM release named):")
    for n, vf in VLLM_FAULTS.items():
        only = f" (not in the default matrix; reached only by {vf.coverage})" if vf.coverage else ""
        print(f"  {n:<24} vLLM PR {vf.pr}, vLLM {', '.join(vf.versions)}: {vf.what}{only}")
    print("vllm connector faults (--target vllm --kv-connector nixl --fault NAME; any runner):")
    for n, f in of_target("vllm").items():
        if f.kind == FaultKind.CONNECTOR:
            print(f"  {n:<24} {f.what}")
    return EXIT_PASS
