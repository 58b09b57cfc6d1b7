"""The feature-coverage table as the reports show it (checks/feature_coverage.py derives it):
workloads by features, each cell the feature's status and the figures behind it.

Why folded below the verdict: coverage qualifies the verdict (a pass over a feature no
workload reached covers nothing) but decides nothing, so the run report's first screen
stays the verdict and the matrix; the folded section's own line names what was asked for
and not exercised, so that a reader sees it without unfolding.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mrbench.contract import BadInput

from ..checks.feature_coverage import FEATURES, Coverage, WorkloadCoverage, run_coverage, tally
from ..record.results import read_summary, salvage_manifest
from ..record.run_record import Manifest, RunSummary

# statuses a reader must act on, in the order the headline names them
SHORTFALLS = (Coverage.MISSED, Coverage.ONE_SIDE, Coverage.NOT_RECORDED, Coverage.UNSUPPORTED)


def css_class(status: Coverage) -> str:
    return "cov-" + status.value.replace(",", "").replace(" ", "-")


def headline(rows: list[WorkloadCoverage]) -> str:
    """'9 workloads: 14 exercised, 1 asked, not exercised (preempt: preemption)'."""
    n = tally(rows)
    parts = [f"{n[Coverage.EXERCISED]} exercised"]
    for s in SHORTFALLS:
        if n[s]:
            where = [f"{r.workload}: {f}" for r in rows for f, c in r.cells.items()
                     if c.status == s]
            shown = ", ".join(where[:3]) + (f", +{len(where) - 3} more" if len(where) > 3
                                             else "")
            parts.append(f"{n[s]} {s.value} ({shown})")
    return f"{len(rows)} workload{'s' * (len(rows) != 1)}: " + ", ".join(parts)


def context(manifest: Manifest | None, summary: RunSummary) -> dict[str, Any]:
    """What the coverage template macro renders: the headline, the feature columns any
    workload has, one row per workload (a cell None where the feature is absent)."""
    rows = run_coverage(manifest, summary)
    columns = [f for f in FEATURES if any(f in r.cells for r in rows)]
    return dict(headline=headline(rows), columns=columns, legend=[
        (s.value, css_class(s)) for s in Coverage],
        rows=[dict(name=r.workload, unsupported=r.unsupported,
                   cells=[None if f not in r.cells else dict(
                       status=r.cells[f].status.value, cls=css_class(r.cells[f].status),
                       detail=r.cells[f].detail, asked=r.cells[f].asked)
                       for f in columns]) for r in rows])


def run_dir_context(run_dir: Path) -> dict[str, Any] | None:
    """`context` of a results directory (a campaign's run), or None where its summary does
    not read: a campaign report shows what it can."""
    try:
        summary = read_summary(run_dir)
        manifest = salvage_manifest(json.loads(
            (run_dir / "manifest.json").read_text(encoding="utf-8")))
    except (BadInput, OSError, ValueError):
        return None
    return context(manifest, summary)


def markdown(manifest: Manifest | None, summary: RunSummary) -> list[str]:
    """The coverage as Markdown lines: per workload the features exercised, and those
    not covered with their status and figures."""
    rows = run_coverage(manifest, summary)
    if not rows:
        return []
    out = ["", f"#### Feature coverage: {headline(rows)}", "",
           "| workload | exercised | not covered |", "|---|---|---|"]
    for r in rows:
        done = [f for f, c in r.cells.items() if c.covered]
        if r.unsupported:
            short = [f"unsupported here: {r.unsupported}"
                     + (f" (asked: {', '.join(r.cells)})" if r.cells else "")]
        else:
            short = [f"{f}: {c.status.value} ({c.detail})" for f, c in r.cells.items()
                     if not c.covered]
        out.append(f"| {r.workload} | {', '.join(done) or '-'} | "
                   f"{'; '.join(short).replace('|', '/') or '-'} |")
    return out
