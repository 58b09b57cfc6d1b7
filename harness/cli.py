"""mrbench: replay workloads on a candidate and a baseline model runner and gate regressions.

Exit codes: 0 pass, 1 regression, 2 bad input, 3 a run failed.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from .errors import EXIT_BAD_INPUT, EXIT_PASS, BadInput


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line and exit 2 (no usage dump)."""

    def error(self, message: str) -> None:    # type: ignore[override]
        raise BadInput(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="mrbench", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="run suites or workloads on baseline and candidate")
    r.add_argument("what", nargs="*", default=["quick"], metavar="SUITE|WORKLOAD",
                   help="shipped suite name, suite YAML path, or workload name (default quick)")
    r.add_argument("--target", default="bundled")
    r.add_argument("--candidate", default="v2", help="candidate runner (default v2)")
    r.add_argument("--baseline", default="v1", help="baseline runner (default v1)")
    r.add_argument("--device", default="cpu")
    r.add_argument("--model", help="model directory (default: the target's bundled model)")
    r.add_argument("--dataset", help="GSM8K JSONL path (or hf:openai/gsm8k when online)")
    r.add_argument("--fault", action="append", default=[], metavar="NAME",
                   help="fault switch for the candidate (repeatable)")
    r.add_argument("--out", type=Path, help="results directory (default results/<time>-<suite>)")
    r.add_argument("--seed", type=int, help="engine seed and problem-generator seed")
    r.add_argument("--limit", type=int, help="problems / requests per workload")
    r.add_argument("--json", action="store_true", help="print summary.json instead of a table")

    c = sub.add_parser("compare", help="gate the candidate side of one run against another's")
    c.add_argument("base", type=Path)
    c.add_argument("cand", type=Path)
    c.add_argument("--side", default="candidate", choices=["candidate", "baseline"],
                   help="which side of each run to compare (default candidate)")
    c.add_argument("--out", type=Path)
    c.add_argument("--json", action="store_true")

    rep = sub.add_parser("report", help="(re)render report.html of results directories")
    rep.add_argument("runs", nargs="+", type=Path)

    ls = sub.add_parser("list", help="workloads, suites, targets and faults")
    ls.add_argument("--json", action="store_true")
    return p


def _side(value: str, target: str, device: str, model: str | None, faults: tuple[str, ...],
          seed: int):
    from .targets.base import SideSpec
    t, _, runner = value.rpartition(":")
    if t and t != target:
        raise BadInput(f"runner {value!r} names target {t!r} but --target is {target!r} "
                       "(cross-target runs arrive with the vLLM target)")
    return SideSpec(runner=runner, device=device, model=model, faults=faults, seed=seed)


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def print_summary(summary: dict, path: Path, as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    rows = [("workload", "metric", "baseline", "candidate", "delta", "p", "verdict")]
    for c in summary["checks"]:
        rows.append((c["workload"], c["metric"], _fmt(c["baseline"]), _fmt(c["candidate"]),
                     _fmt(c["delta"]), _fmt(c["p_value"]), c["verdict"].upper()
                     if c["verdict"] == "regression" else c["verdict"]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)))
    for f in summary["failures"]:
        print(f"FAILED {f['workload']} ({f['side']}): {f['error']}")
    print(f"verdict: {summary['verdict']}")
    print(f"report: {path / 'report.html'}")


def cmd_run(a: argparse.Namespace) -> int:
    from workloads import workloads as known_workloads

    from .orchestrate import Overrides, run_suite
    from .results import default_out
    from .suite import Suite, load_suite, shipped_suites, single_workload_suite
    suites = []
    for w in a.what:
        if w in known_workloads() and w not in shipped_suites():
            suites.append(single_workload_suite(w))
        else:
            suites.append(load_suite(w))
    if len(suites) == 1:
        suite = suites[0]
    else:
        entries = [e for s in suites for e in s.workloads]
        ids = [e.id for e in entries]
        if len(set(ids)) != len(ids):
            raise BadInput(f"workload ids repeat across {a.what}; run them separately")
        suite = Suite(name="+".join(s.name for s in suites), thresholds=suites[0].thresholds,
                      workloads=entries)
    if a.limit is not None and a.limit < 1:
        raise BadInput(f"--limit must be >= 1, got {a.limit}")
    seed = 0 if a.seed is None else a.seed
    base = _side(a.baseline, a.target, a.device, a.model, (), seed)
    cand = _side(a.candidate, a.target, a.device, a.model, tuple(a.fault), seed)
    out = a.out or default_out(suite.name)
    summary, code, path = run_suite(suite, a.target, base, cand,
                                    Overrides(a.seed, a.limit, a.dataset), out)
    print_summary(summary, path, a.json)
    return code


def cmd_compare(a: argparse.Namespace) -> int:
    from .compare import compare, latency_summary
    from .orchestrate import overall_verdict
    from .results import RunWriter, check_out, default_out, environment, load_side, read_run
    from .suite import Thresholds
    bm, bs = read_run(a.base)
    cm, cs = read_run(a.cand)
    th = Thresholds.model_validate(bm.get("suite", {}).get("thresholds", {}))
    common = [w for w in bm.get("workloads", {}) if w in cm.get("workloads", {})]
    if not common:
        raise BadInput(f"{a.base} and {a.cand} share no workload")
    out = a.out or default_out("compare")
    check_out(out)
    writer = RunWriter(out)
    checks, metrics = [], {}
    for w in common:
        b, c = load_side(a.base, w, a.side), load_side(a.cand, w, a.side)
        b.resolved = bm.get("resolved", {}).get(w, {}).get(a.side, {})
        c.resolved = cm.get("resolved", {}).get(w, {}).get(a.side, {})
        writer.add_side(w, "baseline", b)
        writer.add_side(w, "candidate", c)
        metrics[w] = dict(baseline=latency_summary(b), candidate=latency_summary(c))
        checks += [x.to_dict() for x in compare(w, b, c, th)]
    verdict, code = overall_verdict(checks, [])
    summary = dict(verdict=verdict, suite=f"compare {a.base.name} -> {a.cand.name}",
                   checks=checks, failures=[], metrics=metrics)
    manifest = dict(environment(), compared=dict(base=str(a.base), cand=str(a.cand),
                                                 side=a.side),
                    base_manifest=bm, cand_manifest=cm)
    path = writer.commit(manifest, summary)
    print_summary(summary, path, a.json)
    return code


def cmd_report(a: argparse.Namespace) -> int:
    from .report import render_report
    from .results import read_run
    for run in a.runs:
        read_run(run)
        print(render_report(run))
    return EXIT_PASS


def cmd_list(a: argparse.Namespace) -> int:
    from runner_impl import FAULTS
    from workloads import workloads

    from .suite import load_suite, shipped_suites
    from .targets.base import TARGETS
    info = dict(
        workloads={n: w.description for n, w in workloads().items()},
        suites={n: load_suite(n).description for n in shipped_suites()},
        targets={n: f().info() for n, f in TARGETS.items()},
        faults={n: asdict(f) for n, f in FAULTS.items()})
    if a.json:
        print(json.dumps(info, indent=2, default=str))
        return EXIT_PASS
    for section in ("workloads", "suites"):
        print(f"{section}:")
        for n, d in info[section].items():
            print(f"  {n:<12} {d}")
    print("targets:")
    for n, d in info["targets"].items():
        print(f"  {n:<12} runners: {', '.join(d['runners'])}")
    print("faults (apply to the candidate with --fault NAME):")
    for n, f in info["faults"].items():
        print(f"  {n:<24} vLLM PR {f['vllm_pr']}: {f['bug_class']}")
    return EXIT_PASS


def main(argv: list[str] | None = None) -> int:
    from . import targets  # noqa: F401  (registers the targets)
    try:
        a = _parser().parse_args(argv)
        return {"run": cmd_run, "compare": cmd_compare, "report": cmd_report,
                "list": cmd_list}[a.cmd](a)
    except BadInput as e:
        print(f"mrbench: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("mrbench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
