"""`mrbench history`: append runs to the SQLite history, list them, or render the trend
report with its change points.

`history report` exits 0 when no group's newest run starts or confirms a change point, 1
when one does (in a judged metric: counts, accuracy, latency and throughput ratios; the
one-line summary on stdout names the metric, group and first bad commit), and 2 on bad
input (a missing or unreadable database, a bad flag, a --gate-run not in the history).
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from mrbench.contract import BadInput

from ..record import history
from ..record.errors import EXIT_PASS, EXIT_REGRESSION
from ..show.formatting import fmt_num

REPORT_EXIT_CODES = ("exit codes: 0 no group's newest run starts or confirms a change point; "
                     "1 one does (the last line names the metric, its group and the first "
                     "bad vLLM commit, or mrbench's for the bundled runner); 2 bad input")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`mrbench history` and its subcommands (add, report, list)."""
    h = sub.add_parser("history", help="result history (SQLite) and trend reports")
    hsub = h.add_subparsers(dest="history_cmd", required=True, parser_class=type(h))
    ha = hsub.add_parser("add", help="append runs to the history (creates the database)")
    ha.add_argument("runs", nargs="+", type=Path)
    hr = hsub.add_parser("report", help="trend report with change points, one HTML file; "
                         "exit 1 when the newest run starts a change point",
                         description="Trend report with change points, one HTML file; "
                         "each change names its first bad vLLM commit and the last good one.",
                         epilog=REPORT_EXIT_CODES)
    hr.add_argument("--gate-run", type=Path, action="append", metavar="RUN",
                    help="exit 1 only for changes in the groups of these runs (repeatable; "
                         "the runs a job just added); default: every group")
    hr.add_argument("--out", type=Path, help="HTML file (default: history.html beside the db)")
    hr.add_argument("--latency-min-rel", type=float, default=0.20,
                    help="smallest latency/throughput step to mark (default 0.20)")
    hr.add_argument("--absolute-latency", action="store_true",
                    help="judge latency on the candidate's own figures, not the per-run "
                         "candidate/baseline ratio (for a stable, dedicated host)")
    hr.add_argument("--json", action="store_true", help="print the change points as JSON")
    hl = hsub.add_parser("list", help="the runs in the history")
    for x in (ha, hr, hl):
        x.add_argument("--db", type=Path, help="database (default results/history.sqlite)")
    return h


def add(a: argparse.Namespace) -> int:
    db = a.db or history.DEFAULT_DB
    n = history.add(db, a.runs)
    print(f"added {n} of {len(a.runs)} runs to {db}")
    return EXIT_PASS


def list_runs(a: argparse.Namespace) -> int:
    for r in history.runs(a.db or history.DEFAULT_DB):
        build = r["candidate_vllm_commit"] or r["candidate_vllm_version"] or "-"
        print(f"{r['created'][:19]}  {(r['git_sha'] or '?')[:10]}  {build[:10]:<10}  "
              f"{r['suite']:<10} {r['candidate']} vs {r['baseline']}  {r['verdict']:<10} "
              f"{r['run_dir']}")
    return EXIT_PASS


def _gate_runs(db: Path, given: list[Path] | None) -> list[str] | None:
    """--gate-run RUN ...: their resolved paths, each of which must be in the history."""
    if not given:
        return None
    known = {r["run_dir"] for r in history.runs(db)}
    out = [str(Path(r).resolve()) for r in given]
    missing = [g for g, r in zip(given, out) if r not in known]
    if missing:
        raise BadInput(f"--gate-run {missing[0]} is not in the history {db} (history add it "
                       "first)")
    return out


def _change_json(c: dict) -> dict:
    run, good, cp = c["run"], c["last_good"] or {}, c["cp"]
    return dict(group=c["group_key"], workload=c["workload"], metric=c["metric"],
                run_number=c["index"] + 1, run_dir=run["run_dir"], date=run["created"],
                git_sha=run["git_sha"], candidate_vllm_commit=run["candidate_vllm_commit"],
                candidate_vllm_version=run["candidate_vllm_version"], build=c["build"],
                last_good_run_dir=good.get("run_dir"), last_good_date=good.get("created"),
                last_good_vllm_commit=good.get("candidate_vllm_commit"),
                last_good_build=c["last_good_build"], before=cp.before, after=cp.after,
                rel_change=cp.rel_change, p_value=cp.p_value, newest=c["newest"])


def _pct(rel: float) -> str:
    return f"{rel:+.1%}" if math.isfinite(rel) else fmt_num(rel, signed=True)


def _summary(newest: list[dict], n_changes: int, n_runs: int, path: Path) -> str:
    """The one line that says what the exit code is about."""
    if not newest:
        return (f"history: no newest run starts a change point ({n_changes} change points "
                f"in {n_runs} runs); report: {path}")
    c = newest[0]
    more = f" (and {len(newest) - 1} more)" if len(newest) > 1 else ""
    return (f"history: CHANGE with the newest run: {c['workload']}/{c['metric']} "
            f"{fmt_num(c['cp'].before)} -> {fmt_num(c['cp'].after)} "
            f"({_pct(c['cp'].rel_change)}) in {c['group_title']}; first bad: "
            f"{c['build']} on {c['run']['created'][:10]}; last good: {c['last_good_build']}"
            f"{more}; report: {path}")


def report(a: argparse.Namespace) -> int:
    from ..show.history_report import build_of, group_title, render  # lazy: matplotlib
    db = a.db or history.DEFAULT_DB
    if a.latency_min_rel < 0:
        raise BadInput(f"--latency-min-rel must be >= 0, got {a.latency_min_rel}")
    history.open_existing(db).close()
    gate = _gate_runs(db, a.gate_run)
    out = a.out or db.with_name("history.html")
    path, res = render(db, out, a.latency_min_rel, a.absolute_latency, gate_runs=gate)
    changes = [dict(c, group_key=g["key"], group_title=group_title(g["key"]),
                    build=build_of(c["run"]),
                    last_good_build=build_of(c["last_good"]) if c["last_good"] else "none")
               for g in res["groups"] for c in g["changes"]]
    newest = [c for c in changes if c["newest"]]
    code = EXIT_REGRESSION if newest else EXIT_PASS
    if a.json:
        print(json.dumps(dict(runs=res["n_runs"], changes=[_change_json(c) for c in changes],
                              newest=[_change_json(c) for c in newest], exit=code,
                              report=str(path)), indent=2, default=str))
        return code
    for c in changes:
        print(f"change: {c['workload']}/{c['metric']} from run {c['index'] + 1} "
              f"({c['run']['created'][:10]}, {c['build']}; last good {c['last_good_build']}): "
              f"{fmt_num(c['cp'].before)} -> {fmt_num(c['cp'].after)}"
              f"{' [new with the newest run]' if c['newest'] else ''}")
    print(_summary(newest, len(changes), res["n_runs"], path))
    return code


def main(a: argparse.Namespace) -> int:
    return {"add": add, "list": list_runs, "report": report}[a.history_cmd](a)
