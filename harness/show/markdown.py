"""Markdown for CI job summaries: a run's verdict table and its feature coverage, or a fault
catch matrix."""
from __future__ import annotations

from pathlib import Path

from ..record.campaign_record import read_fault_matrix
from ..record.results import read_record
from ..record.run_record import Verdict
from . import coverage
from .failure_hints import hint_for
from .formatting import fmt_num, fmt_p


def run_markdown(run_dir: Path) -> str:
    m, s = read_record(run_dir)
    lines = [f"### mrbench {s.suite}: **{s.verdict.upper()}**", "",
             f"candidate `{s.candidate}` vs baseline `{s.baseline}`"
             + (f", faults {s.candidate_faults}" if s.candidate_faults else ""),
             "", "| workload | metric | baseline | candidate | delta | p | verdict |",
             "|---|---|---|---|---|---|---|"]
    checks = sorted(s.checks, key=lambda c: c.verdict != Verdict.REGRESSION)
    for c in checks:
        if c.verdict == Verdict.INFO:
            continue
        v = "**REGRESSION**" if c.verdict == Verdict.REGRESSION else c.verdict
        lines.append(f"| {c.workload} | {c.metric} | {fmt_num(c.baseline)} | "
                     f"{fmt_num(c.candidate)} | {fmt_num(c.delta, signed=True)} | "
                     f"{fmt_p(c.p_value)} | {v} |")
    for f in s.failures:
        hint = hint_for(f.error)
        lines.append(f"\nFAILED {f.workload} ({f.side}): {f.error}  \nwhat happened: "
                     f"{hint.happened}  \nwhat to try: {hint.to_try}")
    for u in s.unsupported:
        lines.append(f"\nUNSUPPORTED HERE {u.workload} ({u.side}, {u.target}): {u.reason}")
    lines += coverage.markdown(m, s)
    return "\n".join(lines) + "\n"


def faults_markdown(camp_dir: Path) -> str:
    res = read_fault_matrix(camp_dir)
    c = res.clean
    lines = [f"### mrbench faults {res.suite}", "",
             f"clean run: **{c.verdict}**, {c.false_alarms} false alarms"
             + (f" ({', '.join(c.flagged)})" if c.flagged else ""), "",
             "| fault | caught | by |", "|---|---|---|"]
    for name, r in res.faults.items():
        lines.append(f"| {name} | {'yes' if r.caught else '**' + r.status + '**'} | "
                     f"{', '.join(r.by) or '-'}"
                     + (f" (not counted, alarmed clean too: {', '.join(r.alarmed_clean)})"
                        if r.alarmed_clean else "") + " |")
    return "\n".join(lines) + "\n"
