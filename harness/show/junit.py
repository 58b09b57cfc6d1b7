"""A run's checks as JUnit XML, the test-report format CI systems render (GitHub's test
reporters, Buildkite's test analytics, GitLab, Jenkins): one test case per check, so a CI
page shows which check of which workload regressed and by how much, not one exit code.

The mapping:
- a test suite per workload (`mrbench.SUITE.WORKLOAD`), a test case per check (its metric);
- `regression` is a failure whose message carries the figures (baseline, candidate, change,
  CI, p, bar) and whose text the method and note;
- `error` (a check that could not measure what it gates) is an error;
- `info` (reported, not gated, or not measured) is skipped with its note as the message, so
  a check that measured nothing never shows as passed;
- a side that failed on a workload is an error case named after the side, with its error;
- a workload a side's target cannot run is a skipped case, with the reason.
Written with the standard library (`xml.etree`): the format is a handful of elements.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from ..record.run_record import Check, RunSummary, Verdict
from .html import write_atomic


def _fmt(x: Any) -> str:
    return "-" if x is None else f"{x:.6g}" if isinstance(x, float) else str(x)


def _figures(c: Check) -> str:
    ci = c.ci or [None, None]
    return (f"{c.metric}: baseline {_fmt(c.baseline)}, candidate "
            f"{_fmt(c.candidate)} {c.unit or ''}, change {_fmt(c.delta)} "
            f"[{_fmt(ci[0])}, {_fmt(ci[1])}], p {_fmt(c.p_value)}; bar "
            f"{c.threshold or '-'}")


def to_junit(summary: RunSummary) -> ET.ElementTree:
    """The JUnit document of a run summary."""
    suite = summary.suite or "run"
    by_workload: dict[str, list[ET.Element]] = {}

    def case(workload: str, name: str) -> ET.Element:
        el = ET.Element("testcase", classname=f"mrbench.{suite}.{workload}", name=name,
                        time="0")
        by_workload.setdefault(workload, []).append(el)
        return el

    for c in summary.checks:
        el = case(c.workload, c.metric)
        detail = "\n".join(x for x in (c.method, c.note) if x)
        if c.verdict == Verdict.REGRESSION:
            ET.SubElement(el, "failure", message=_figures(c), type=Verdict.REGRESSION).text = detail
        elif c.verdict == Verdict.ERROR:
            ET.SubElement(el, "error", message=c.note or _figures(c),
                          type="not measured").text = detail
        elif c.verdict == Verdict.INFO:
            ET.SubElement(el, "skipped", message=c.note or "reported, not gated")
        ET.SubElement(el, "system-out").text = _figures(c)
    for f in summary.failures:
        el = case(f.workload, f"{f.side} side")
        ET.SubElement(el, "error", message=f.error or "failed",
                      type="side failed").text = f.traceback or ""
    for u in summary.unsupported:
        el = case(u.workload, f"{u.side} side")
        ET.SubElement(el, "skipped", message=u.reason or "unsupported here")

    root = ET.Element("testsuites", name=f"mrbench {suite}")
    for workload, cases in by_workload.items():
        ts = ET.SubElement(root, "testsuite", name=f"mrbench.{suite}.{workload}",
                           tests=str(len(cases)),
                           failures=str(sum(c.find("failure") is not None for c in cases)),
                           errors=str(sum(c.find("error") is not None for c in cases)),
                           skipped=str(sum(c.find("skipped") is not None for c in cases)))
        ts.extend(cases)
    for k in ("tests", "failures", "errors", "skipped"):
        root.set(k, str(sum(int(ts.get(k)) for ts in root)))
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(summary: RunSummary, path: Path) -> Path:
    """Write the run's JUnit XML to `path` whole (a reader never sees half a file)."""
    doc = to_junit(summary)
    text = ET.tostring(doc.getroot(), encoding="unicode", xml_declaration=True)
    return write_atomic(path, text + "\n")
