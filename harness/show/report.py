"""Self-contained HTML report for one results directory.

``render_report(run_dir)`` reads what a run wrote (``manifest.json``, ``summary.json``,
``requests.csv``, ``itl.csv``, ``steps.csv``) and writes ``<run_dir>/report.html``: one file,
inline CSS, every plot a ``data:image/png;base64`` image, no external resource of any kind.

Layout: title + overall verdict badge (+ failures), the verdict table, per-workload plots
(latency CDFs, P99 with CI, syncs per step per phase, per-step duration, accuracy and token
agreement; drawn by report_plots.py), then the manifest. Any input may be missing, empty or
lack columns: the plot that needs it is skipped with a note, the report is still written. Tables are read with
``results.read_table``, the reader compare uses too; a newer results format is refused.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterable

import matplotlib.pyplot as plt
import pandas as pd

from ..record.results import (
    UnreadableTable,
    check_format,
    read_table,
    salvage_manifest,
    salvage_summary,
)
from ..record.run_record import Check, Manifest, Verdict
from ..run.compile_cache import describe_start
from .formatting import fmt_ci, fmt_num, fmt_p
from .html import environment, fig_to_data_uri, write_atomic
from .report_plots import PLOTS, SIDES, workload_rows

__all__ = ["render_report"]

log = logging.getLogger(__name__)

TEMPLATE_NAME = "report.html.j2"


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


def _check_row(c: Check) -> dict:
    return {
        "workload": c.workload,
        "metric": c.metric,
        "unit": c.unit,
        "baseline": fmt_num(c.baseline),
        "candidate": fmt_num(c.candidate),
        "delta": fmt_num(c.delta, signed=True),
        "ci": fmt_ci(c.ci),
        "p_value": fmt_p(c.p_value),
        "threshold": c.threshold,
        "method": c.method,
        "verdict": str(c.verdict),
        "note": c.note,
    }


def _request_counts(requests: pd.DataFrame | None, workload: str) -> dict[str, int]:
    out = {}
    for side in SIDES:
        sub = workload_rows(requests, workload, side)
        out[side] = 0 if sub is None else len(sub)
    return out


RAN_FIELDS = (("engine", "engine"), ("runner_class", "runner class"),
              ("attention_backend", "attention backend"), ("cudagraph_mode", "CUDA graphs"),
              ("device", "device"), ("dtype", "dtype"), ("faults", "faults"),
              ("startup_s", "engine start (s)"), ("kernels", "kernels at start"))


def _engine_of(r: dict) -> str:
    if r.get("engine_name"):
        return str(r["engine_name"])
    if r.get("vllm_version"):
        return f"vLLM {r['vllm_version']}"
    return str(r.get("target") or "?")


def _what_ran(manifest: Manifest | None) -> list[dict]:
    """Per side, what actually ran (read back from the engines, across workloads): the
    header a reader checks first. Values that differ between workloads are all listed."""
    if manifest is None:
        return []
    resolved = manifest.resolved
    sides = manifest.sides or {}
    rows = []
    for side in SIDES:
        seen: dict[str, list[str]] = {k: [] for k, _ in RAN_FIELDS}
        for per_side in resolved.values():
            r = (per_side or {}).get(side) if isinstance(per_side, dict) else None
            if not isinstance(r, dict):
                continue
            vals = dict(r, engine=_engine_of(r),
                        faults=", ".join(r.get("faults") or []) or "none",
                        startup_s=fmt_num(r.get("startup_s"), sig=3),
                        kernels=describe_start(r.get("engine_start")))
            for k, _ in RAN_FIELDS:
                v = str(vals.get(k) if vals.get(k) not in (None, "") else "-")
                if v not in seen[k]:
                    seen[k].append(v)
        spec = sides.get(side) or {}
        if not any(seen.values()):
            if not spec:
                continue
            seen["device"] = [str(spec.get("device", "-"))]
        rows.append(dict(side=side, runner=f"{spec.get('target', '?')}:{spec.get('runner', '?')}",
                         **{k: "; ".join(v) or "-" for k, v in seen.items()}))
    return rows


def _build_context(run_dir: Path) -> dict:
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

    requests = _read_table(run_dir, "requests")
    itl = _read_table(run_dir, "itl")
    steps = _read_table(run_dir, "steps")
    profile = _read_table(run_dir, "profile")   # profiled-pass steps: sync/op counts
    ctx = {"summary": summary, "requests": requests, "itl": itl, "steps": steps,
           "profile": profile}

    workloads = []
    for w in _ordered_workloads(checks, (requests, itl, steps)):
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
        workloads.append({"name": w, "plots": plots, "skipped": skipped,
                          "counts": _request_counts(requests, w)})

    if raw_manifest is not None:     # the file as written, whatever the model reads of it
        manifest_text = json.dumps(raw_manifest, indent=2, ensure_ascii=False, default=str)
    else:
        manifest_text = manifest_err

    return {
        "suite": summary.suite or run_dir.name,
        "run_dir": str(run_dir),
        "verdict": str(summary.verdict),
        "summary_error": summary_err,
        "failures": summary.failures,
        "unsupported": summary.unsupported,
        "interrupted": summary.interrupted,
        "checks": [_check_row(c) for c in checks],
        "n_regressions": sum(1 for c in checks if c.verdict == Verdict.REGRESSION),
        "workloads": workloads,
        "manifest": manifest_text,
        "manifest_error": manifest_err,
        "ran": _what_ran(manifest),
        "ran_fields": RAN_FIELDS,
        "git_sha": None if manifest is None else manifest.git_sha,
        "git_dirty": None if manifest is None else manifest.git_dirty,
        "missing_files": [n for n in ("requests.csv", "itl.csv", "steps.csv")
                          if ctx[n[:-4]] is None],
    }


def render_report(run_dir: Path, out: Path | None = None) -> Path:
    """Write ``<run_dir>/report.html`` (or ``out``): one self-contained HTML file; returns the
    path. Missing/empty inputs are tolerated (their plots are skipped); the write is atomic."""
    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir / "report.html"
    html = environment().get_template(TEMPLATE_NAME).render(**_build_context(run_dir))

    return write_atomic(out, html)
