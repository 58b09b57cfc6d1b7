"""Self-contained HTML report for one results directory.

``render_report(run_dir)`` reads what a run wrote (``manifest.json``, ``summary.json``,
``requests.csv``, ``itl.csv``, ``steps.csv``, ``engine-logs/``) and writes
``<run_dir>/report.html``: one file, inline CSS, every plot a ``data:image/png;base64``
image (a sparkline an inline SVG), no script and no external resource of any kind.

Why this layout: a reader opens the report to learn whether the candidate regressed,
where, and by how much; a flat table of ~90 checks in suite order, most of them figures
merely reported, made that a search. So the first screen is the verdict line (the run's
identity: suite, both sides with their builds, device, duration), a matrix of workloads by
check family whose cells give each family's worst verdict and the figure that decided it
against its bar, and the regressions, errors and "not measured" checks with their evidence.
Everything else is below, per workload and folded: the checks (each method text said once,
as a footnote), the plots (report_plots.py), the sparklines of the history where one is
given; then the engines and the manifest. Any input may be missing, empty or lack columns:
what needs it is skipped with a note, the report is still written. Tables are read with
``results.read_table``, the reader compare uses too; a newer results format is refused.
"""
from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import re
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Iterable

import matplotlib.pyplot as plt
import pandas as pd
from markupsafe import Markup

from ..record import history
from ..record.metrics import LATENCY
from ..record.results import (
    UnreadableTable,
    check_format,
    read_table,
    salvage_manifest,
    salvage_summary,
)
from ..record.run_record import BarKind, Check, Manifest, RunSummary
from . import coverage
from .failure_hints import hint_for
from .formatting import (
    FAMILIES,
    MISSING,
    NOT_MEASURED,
    OTHER,
    STATUSES,
    check_family,
    check_status,
    figure_and_bar,
    fmt_delta,
    fmt_delta_ci,
    fmt_num,
    fmt_p,
    fmt_pct,
    fmt_vs_bar,
    relative_bar,
    relative_change,
)
from .html import environment, fig_to_data_uri, sparkline, write_report
from .report_identity import RAN_FIELDS, engine_starts, identity, what_ran
from .report_plots import PLOTS, SIDES, STATUS_COLORS, workload_rows

__all__ = ["render_report", "HISTORY_LAST"]

log = logging.getLogger(__name__)

TEMPLATE_NAME = "report.html.j2"
HISTORY_LAST = 20     # runs a sparkline spans, this one included (`mrbench report --history`)
ATTENTION = STATUSES[:3]        # regression, error, not measured: listed first, with evidence


def _read_json(path: Path) -> tuple[Any, str | None]:
    """(data, error message); data is None when the file is absent or unreadable."""
    if not path.is_file():
        return None, f"{path.name} not found"
    try:
        return json.loads(path.read_text(encoding="utf-8")), None
    except (OSError, ValueError) as e:
        return None, f"{path.name} unreadable: {e}"


def _read_table(run_dir: Path, name: str) -> pd.DataFrame | None:
    """The table as `results.read_table` reads it (what compare reads too), or None when
    absent, empty or unreadable: a report skips the plots of a table it cannot parse."""
    try:
        return read_table(run_dir, name)
    except UnreadableTable as e:
        log.warning("report: %s", e)
        return None


def _ordered_workloads(checks: list[Check], tables: Iterable[pd.DataFrame | None]) -> list[str]:
    out: dict[str, None] = {}
    for c in checks:
        out.setdefault(c.workload, None)
    for df in tables:
        if df is not None and "workload" in df.columns:
            for w in df["workload"].dropna().unique():
                out.setdefault(str(w), None)
    return list(out)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text)


def _anchors(checks: list[Check]) -> list[str]:
    """One id per check for its detail row, unique even where a workload repeats a metric
    (an import reports each side's figure as a check of its own)."""
    seen: Counter[str] = Counter()
    out = []
    for c in checks:
        base = f"check-{_slug(c.workload)}-{_slug(c.metric)}"
        seen[base] += 1
        out.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return out


def _rank(c: Check) -> tuple[int, bool, bool, float]:
    """Sort key, the check a cell shows first: the worst status, then one held to a bar it
    has a figure against, then one with a figure at all, then the one furthest past (or
    nearest to) its relative bar."""
    rel, bar = relative_change(c), relative_bar(c)
    past = 0.0 if rel is None or not bar else (rel[0] - bar) / abs(bar) * (1 if bar > 0 else -1)
    has_figure = figure_and_bar(c)[0] != MISSING
    gated = c.bar is not None and c.bar.kind != BarKind.NONE
    return STATUSES.index(check_status(c)), not (gated and has_figure), not has_figure, -past


def _tally(statuses: Iterable[str]) -> str:
    """'7 checks: 1 regression, 2 not measured' (only the statuses to act on named)."""
    n = Counter(statuses)
    total = sum(n.values())
    bad = ", ".join(f"{n[s]} {s}" for s in ATTENTION if n[s])
    return f"{total} check{'s' * (total != 1)}" + (f": {bad}" if bad else "")


def _matrix(checks: list[Check], anchors: list[str], workloads: list[str]) -> dict:
    """Workloads x check families; a cell is its worst check (`_rank`) with the figure that
    decided it against its bar, or None (shown as '—') where the family has no check."""
    cells: dict[tuple[str, str], list[tuple[Check, str]]] = {}
    for c, a in zip(checks, anchors):
        cells.setdefault((c.workload, check_family(c.metric)), []).append((c, a))
    columns = list(FAMILIES) + ([OTHER] if any(f == OTHER for _, f in cells) else [])
    rows = []
    for w in workloads:
        row = []
        for fam in columns:
            found = sorted(cells.get((w, fam), []), key=lambda ca: _rank(ca[0]))
            if not found:
                row.append(None)
                continue
            c, anchor = found[0]
            row.append(dict(status=check_status(c), figure=_vs_bar(c), metric=c.metric,
                            anchor=anchor, tally=_tally(check_status(x) for x, _ in found)))
        rows.append(dict(name=w, anchor=f"wl-{_slug(w)}", cells=row))
    return dict(columns=columns, rows=rows)


def _vs_bar(c: Check) -> str:
    """The cell's figure: formatting.fmt_vs_bar, or what the check lacks to have one."""
    if c.baseline is None and c.candidate is None and c.delta is None:
        return NOT_MEASURED if check_status(c) in ATTENTION else "no figure"
    return fmt_vs_bar(c)


def _evidence(c: Check) -> str:
    """A check's numbers in one line, what it has of them: baseline → candidate, change,
    CI, p, bar ('10 → 11 ms · Δ +10 % · CI [+7 %, +13 %] · p 0.001 · bar +5 %')."""
    parts = []
    if c.baseline is not None or c.candidate is not None:
        unit = f" {c.unit}" if c.unit else ""
        parts.append(f"{fmt_num(c.baseline)} → {fmt_num(c.candidate)}{unit}")
    if c.delta is not None:
        parts.append(f"Δ {fmt_delta(c)}")
    if c.ci is not None:
        parts.append(f"CI {fmt_delta_ci(c)}")
    if c.p_value is not None:
        parts.append(f"p {fmt_p(c.p_value)}")
    bar = figure_and_bar(c)[1]
    parts.append(f"bar {bar}" if bar is not None else
                 "not gated" if c.bar is not None else "bar not recorded")
    return " · ".join(parts)


def _check_row(c: Check, anchor: str, method_ref: str, spark: Markup | None) -> dict:
    return {
        "anchor": anchor, "metric": c.metric, "unit": c.unit, "family": check_family(c.metric),
        "baseline": fmt_num(c.baseline), "candidate": fmt_num(c.candidate),
        "delta": fmt_delta(c), "ci": fmt_delta_ci(c), "p_value": fmt_p(c.p_value),
        "threshold": c.threshold, "method_ref": method_ref, "status": check_status(c),
        "note": c.note, "spark": spark,
    }


def _request_counts(requests: pd.DataFrame | None, workload: str) -> dict[str, int]:
    out = {}
    for side in SIDES:
        sub = workload_rows(requests, workload, side)
        out[side] = 0 if sub is None else len(sub)
    return out


def _engine_logs(run_dir: Path, out_dir: Path) -> list[dict]:
    """The engine logs the run kept (`engine-logs/`), each with a link relative to the
    report, so the report opens them wherever it was written."""
    folder = run_dir / "engine-logs"
    if not folder.is_dir():
        return []
    return [dict(name=f.name, href=Path(os.path.relpath(f, out_dir)).as_posix())
            for f in sorted(folder.iterdir()) if f.is_file()]


def _history_sparks(run_dir: Path, summary: RunSummary, manifest: Manifest | None,
                    db: Path, last: int) -> tuple[dict[str, Markup], str]:
    """{check anchor key: sparkline} of each gated latency figure (its candidate/baseline
    change, what the gate judges) over the newest `last` runs comparable with this one in
    the history (history.series: target, suite, device, model and runners alike), this run
    last; and a line saying what was read. A reader sees whether a figure near its bar has
    always been there or just arrived."""
    if manifest is None:
        return {}, f"history {db}: this run has no manifest to find its comparable runs by"
    like, _ = history.record_of(manifest, summary, run_dir)
    group = history.series(db).get(tuple(like[k] for k in history.GROUP_KEYS), {})
    out, runs = {}, set()
    for c in summary.checks:
        bar = relative_bar(c)
        if c.metric not in LATENCY or bar is None:
            continue
        earlier = [(r["run_dir"], v) for r, v in
                   group.get((c.workload, "candidate", history.RATIO + c.metric), [])
                   if r["run_dir"] != like["run_dir"]]
        earlier = earlier[max(len(earlier) - (last - 1), 0):]
        runs.update(d for d, _ in earlier)
        rel = relative_change(c)
        values = [v for _, v in earlier] + ([rel[0]] if rel else [])
        if len(values) < 2:
            continue
        title = (f"{c.metric}, candidate vs baseline in the last {len(values)} comparable "
                 f"runs{', this one last' if rel else ''}: "
                 f"{', '.join(fmt_pct(v) for v in values)}; bar {fmt_pct(bar)}")
        out[f"{c.workload}\0{c.metric}"] = sparkline(
            values, bar, title, STATUS_COLORS[check_status(c)] if rel else "#999")
    return out, (f"history {db}: each sparkline spans the newest {last} comparable runs, "
                 f"this one last ({len(runs)} earlier run{'s' * (len(runs) != 1)} found)")


def _coverage(manifest: Manifest | None, summary: RunSummary) -> dict | None:
    """The feature-coverage table (show/coverage.py), or None where the record does not
    read as one: a damaged run must not cost the whole report."""
    try:
        return coverage.context(manifest, summary)
    except Exception as e:  # a report renders what it can
        log.warning("report: feature coverage failed: %r", e)
        return None


def _plots(w: str, ctx: dict) -> tuple[list[dict], list[str]]:
    plots, skipped = [], []
    for key, title, caption, build in PLOTS:
        try:
            fig = build(w, ctx)
        except Exception as e:  # a bad column must not cost the whole report
            log.warning("report: plot %s for %s failed: %r", key, w, e)
            plt.close("all")
            skipped.append(f"{title}: plot failed ({type(e).__name__}: {e})")
            continue
        if fig is None:
            skipped.append(f"{title}: no data")
        else:
            plots.append({"key": key, "title": title, "caption": caption,
                          "src": fig_to_data_uri(fig)})
    return plots, skipped


MAX_PLOT_WORKERS = 16
_PLOT_CTX: dict | None = None      # what forked plot workers read (set only while they run)


def _plots_in_worker(w: str) -> tuple[list[dict], list[str]]:
    return _plots(w, _PLOT_CTX)


def _all_plots(names: list[str], ctx: dict) -> dict[str, tuple[list[dict], list[str]]]:
    """Every workload's plots, drawn by several processes where it can.

    Why: matplotlib draws one figure at a time, 0.1-0.2 s each on a 2-core CPU, and a
    suite's ~40 figures took seconds after every run's verdict (on a GPU host, 15 s of
    `quick`'s time to its report; a `faults` matrix renders one report a run). Forked
    workers inherit `ctx` (the run's tables) without pickling it. Without fork, with one
    CPU, one workload, or a pool that broke, they are drawn here one after another."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    n = min(len(names), cpus or 1, MAX_PLOT_WORKERS)
    if n > 1 and "fork" in mp.get_all_start_methods():
        global _PLOT_CTX
        _PLOT_CTX = ctx
        try:
            with ProcessPoolExecutor(n, mp_context=mp.get_context("fork")) as pool:
                return dict(zip(names, pool.map(_plots_in_worker, names)))
        except (BrokenProcessPool, OSError) as e:
            log.warning("report: plot workers failed (%r); drawing here", e)
        finally:
            _PLOT_CTX = None
    return {w: _plots(w, ctx) for w in names}


def _workload(w: str, pairs: list[tuple[Check, str]], sparks: dict[str, Markup],
              drawn: tuple[list[dict], list[str]], ctx: dict, logs: list[dict]) -> dict:
    """One workload's folded section: its checks, each distinct method once (M1, M2, ...)
    rather than on every row, its plots (`drawn`: plots and those skipped, with why) and
    its engines' logs."""
    methods: dict[str, str] = {}
    rows = []
    for c, a in pairs:
        ref = ""
        if c.method and c.method != "-":
            ref = methods.setdefault(c.method, f"M{len(methods) + 1}")
        rows.append(_check_row(c, a, ref, sparks.get(f"{c.workload}\0{c.metric}")))
    plots, skipped = drawn
    return dict(name=w, anchor=f"wl-{_slug(w)}", checks=rows, tally=_tally(
        r["status"] for r in rows), methods=[(ref, text) for text, ref in methods.items()],
        plots=plots, skipped=skipped, counts=_request_counts(ctx["requests"], w),
        logs=[lg for lg in logs if lg["name"].startswith(f"{w}.")])


def _build_context(run_dir: Path, out: Path, history_db: Path | None, history_last: int
                   ) -> dict:
    raw_summary, summary_err = _read_json(run_dir / "summary.json")
    # what of a damaged summary reads is shown: a check that does not, or a verdict this
    # mrbench does not know (then "error"), is left out and said
    summary, damage = salvage_summary({} if raw_summary is None else raw_summary)
    if raw_summary is not None and damage:
        summary_err = f"summary.json: {damage}"
    raw_manifest, manifest_err = _read_json(run_dir / "manifest.json")
    if isinstance(raw_manifest, dict):
        check_format(raw_manifest, run_dir)     # a newer results format: refused, one line
    manifest = salvage_manifest(raw_manifest)

    checks = summary.checks
    anchors = _anchors(checks)
    requests = _read_table(run_dir, "requests")
    itl = _read_table(run_dir, "itl")
    steps = _read_table(run_dir, "steps")
    profile = _read_table(run_dir, "profile")   # profiled-pass steps: sync/op counts
    ctx = {"summary": summary, "requests": requests, "itl": itl, "steps": steps,
           "profile": profile}
    sparks, history_note = ({}, None) if history_db is None else _history_sparks(
        run_dir, summary, manifest, history_db, history_last)
    logs = _engine_logs(run_dir, out.parent)
    names = _ordered_workloads(checks, (requests, itl, steps))
    drawn = _all_plots(names, ctx)
    workloads = [_workload(w, [(c, a) for c, a in zip(checks, anchors) if c.workload == w],
                           sparks, drawn[w], ctx, logs) for w in names]
    attention = [dict(status=check_status(c), workload=c.workload, metric=c.metric,
                      anchor=a, evidence=_evidence(c), note=c.note,
                      spark=sparks.get(f"{c.workload}\0{c.metric}"))
                 for c, a in sorted(zip(checks, anchors), key=lambda ca: _rank(ca[0]))
                 if check_status(c) in ATTENTION]
    starts_line, starts = engine_starts(manifest)
    failures = [dict(f.to_json_dict(), hint=hint_for(f.error), log_href=(
        Path(os.path.relpath(run_dir / f.engine_log, out.parent)).as_posix()
        if f.engine_log and (run_dir / f.engine_log).is_file() else None))
        for f in summary.failures]

    if raw_manifest is not None:     # the file as written, whatever the model reads of it
        manifest_text = json.dumps(raw_manifest, indent=2, ensure_ascii=False, default=str)
    else:
        manifest_text = manifest_err

    return {
        "suite": summary.suite or run_dir.name,
        "run_dir": str(run_dir),
        "verdict": str(summary.verdict),
        "identity": identity(summary, manifest),
        "summary_error": summary_err,
        "failures": failures,
        "unsupported": summary.unsupported,
        "interrupted": summary.interrupted,
        "n_checks": len(checks),
        "tally": Counter(check_status(c) for c in checks),
        "statuses": STATUSES,
        "matrix": _matrix(checks, anchors, names),
        "attention": attention,
        "coverage": _coverage(manifest, summary),
        "workloads": workloads,
        "manifest": manifest_text,
        "ran": what_ran(manifest),
        "ran_fields": RAN_FIELDS,
        "starts_line": starts_line,
        "starts": starts,
        "logs": logs,
        "history_note": history_note,
        "git_sha": None if manifest is None else manifest.git_sha,
        "git_dirty": None if manifest is None else manifest.git_dirty,
        "missing_files": [n for n in ("requests.csv", "itl.csv", "steps.csv")
                          if ctx[n[:-4]] is None],
    }


def render_report(run_dir: Path, out: Path | None = None, history_db: Path | None = None,
                  history_last: int = HISTORY_LAST) -> Path:
    """Write ``<run_dir>/report.html`` (or ``out``): one self-contained HTML file; returns the
    path. Missing/empty inputs are tolerated (their plots are skipped); the write is atomic.
    With `history_db`, each gated latency figure gets a sparkline over the newest
    `history_last` comparable runs of that history (this one included)."""
    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir / "report.html"
    html = environment().get_template(TEMPLATE_NAME).render(
        **_build_context(run_dir, out, history_db, history_last))
    return write_report(out, html)
