"""`mrbench history`: append runs to the SQLite history, list them, or render the trend
report with its change points."""
from __future__ import annotations

import argparse
import json

from mrbench.contract import BadInput

from ..record import history
from ..record.errors import EXIT_PASS
from ..show.formatting import fmt_num


def add(a: argparse.Namespace) -> int:
    db = a.db or history.DEFAULT_DB
    n = history.add(db, a.runs)
    print(f"added {n} of {len(a.runs)} runs to {db}")
    return EXIT_PASS


def list_runs(a: argparse.Namespace) -> int:
    for r in history.runs(a.db or history.DEFAULT_DB):
        print(f"{r['created'][:19]}  {(r['git_sha'] or '?')[:10]}  {r['suite']:<10} "
              f"{r['candidate']} vs {r['baseline']}  {r['verdict']:<10} {r['run_dir']}")
    return EXIT_PASS


def report(a: argparse.Namespace) -> int:
    from ..show.history_report import render  # lazy: matplotlib, only for the trend report
    db = a.db or history.DEFAULT_DB
    if a.latency_min_rel < 0:
        raise BadInput(f"--latency-min-rel must be >= 0, got {a.latency_min_rel}")
    history.open_existing(db).close()
    out = a.out or db.with_name("history.html")
    path, res = render(db, out, a.latency_min_rel, a.absolute_latency)
    changes = [dict(group=g["key"], workload=c["workload"], metric=c["metric"],
                    run_number=c["index"] + 1, run_dir=c["run"]["run_dir"],
                    git_sha=c["run"]["git_sha"], before=c["cp"].before, after=c["cp"].after,
                    rel_change=c["cp"].rel_change, p_value=c["cp"].p_value)
               for g in res["groups"] for c in g["changes"]]
    if a.json:
        print(json.dumps(dict(runs=res["n_runs"], changes=changes, report=str(path)),
                         indent=2, default=str))
    else:
        for c in changes:
            print(f"change: {c['workload']}/{c['metric']} from run {c['run_number']} "
                  f"({(c['git_sha'] or '?')[:10]}): {fmt_num(c['before'])} -> {fmt_num(c['after'])}")
        print(f"{len(changes)} change points in {res['n_runs']} runs; report: {path}")
    return EXIT_PASS


def main(a: argparse.Namespace) -> int:
    return {"add": add, "list": list_runs, "report": report}[a.history_cmd](a)
