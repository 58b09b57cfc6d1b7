"""The run record's types, in one place: a check's verdict, a run's verdict, and the check.

Why one home: the verdicts were bare strings spelt out wherever they were made or read
(the gate, the history, the reports, the campaign, the scripts), so a typo in one of them
was a check that silently never matched. Here each value is written once; everything else
names the member.

Why StrEnum: a member *is* its JSON string. `json.dumps(Verdict.REGRESSION)` writes the
member's value, the very string that stood there before, so summary.json and the other
files come out byte for byte as they did; and a verdict read back from a run (a plain str,
older runs included) compares equal to its member, so every run reads back unchanged
(StrEnum is Python 3.11's: the project requires 3.11). Nothing here imports the rest of
the harness: every layer can use these types.
"""
from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass

from .errors import EXIT_PASS, EXIT_REGRESSION, EXIT_RUN_FAILED


class Verdict(enum.StrEnum):
    """One check's verdict. PASS and REGRESSION are judgements; INFO is a figure reported
    but not gated (or not measurable, with the reason in its note); ERROR is a check that
    could not measure what it gates, which makes the whole run an error, never a pass."""

    PASS = "pass"
    REGRESSION = "regression"
    INFO = "info"
    ERROR = "error"


class RunVerdict(enum.StrEnum):
    """One run's verdict (summary.json's "verdict"). ERROR covers a failed side, a check in
    error and an interrupted run alike: an interrupted run is an error (it cannot pass),
    and what the interrupt left undone is recorded beside it under "interrupted", not as a
    verdict of its own. IMPORTED is a run made by `mrbench import-bench`: no gate ran."""

    PASS = "pass"
    REGRESSION = "regression"
    ERROR = "error"
    IMPORTED = "imported"


@dataclass
class Check:
    """One gated (or reported) metric of one workload: both sides' figures, the change, its
    CI and p-value, the bar it was held to, the method, and the verdict, with a note that
    says why where the verdict alone does not. `to_dict` is its summary.json form."""

    workload: str
    metric: str
    unit: str
    baseline: float | None
    candidate: float | None
    delta: float | None
    ci: list[float] | None
    p_value: float | None
    threshold: str
    method: str
    verdict: Verdict
    note: str = ""

    def to_dict(self) -> dict:
        """JSON-safe: a non-finite figure becomes None (JSON has no NaN)."""
        d = asdict(self)
        for k in ("baseline", "candidate", "delta", "p_value"):
            if d[k] is not None and not math.isfinite(d[k]):
                d[k] = None
        if d["ci"] is not None:
            d["ci"] = [None if not math.isfinite(x) else x for x in d["ci"]]
        return d


def overall_verdict(checks: list[dict], failures: list[dict]) -> tuple[RunVerdict, int]:
    """A run's verdict and exit code from its checks and failed sides. A failed side, or a
    check that could not measure what it gates ("not measured"), is an error (exit 3):
    never a pass."""
    if failures or any(c["verdict"] == Verdict.ERROR for c in checks):
        return RunVerdict.ERROR, EXIT_RUN_FAILED
    if any(c["verdict"] == Verdict.REGRESSION for c in checks):
        return RunVerdict.REGRESSION, EXIT_REGRESSION
    return RunVerdict.PASS, EXIT_PASS


def fault_status(r: dict) -> str:
    """A fault run's row of a campaign: "caught", "missed", or "not measured". A fault run
    that flagged nothing because an engine failed (a side could not run a workload) measured
    nothing, so it did not miss."""
    if r.get("caught"):
        return "caught"
    return "not measured" if r.get("failures") else "missed"
