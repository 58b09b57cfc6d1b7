"""State: whether the runner's host mirror of its state stayed true to the device.

The host mirror of computed tokens must stay an upper bound of the device truth, within k
(mirror - truth in [0, k]). One that drifts (advanced by every scheduled token while spec
decoding rejects some) is audited against the truth after every profiled step; the count
of steps that broke the bound is deterministic, so it is compared to the suite's limit
directly (docs/checks.md, bug class 2).
"""
from __future__ import annotations

from mrbench.contract import SideResult

from ..record.run_record import Bar, BarKind, Check, DeltaKind, Verdict
from ..record.suite import Thresholds


def audit_check(wl: str, cand: SideResult, th: Thresholds) -> Check | None:
    if not cand.audits:
        return None
    bad = [a for a in cand.audits if a["max_slack"] > a["allowed_slack"]]
    note = "host mirror never ahead of the device truth by more than k"
    if bad:
        a = bad[0]
        note = (f"first violation: {a['instance']} step {a['step']}, mirror - truth = "
                f"{a['max_slack']} (allowed <= {a['allowed_slack']}); worst "
                f"{max(x['max_slack'] for x in bad)}")
    return Check(wl, "state_audit_violations", "steps", None, float(len(bad)), None, None, None,
                 f"<= {th.audit_violations}",
                 f"host mirror vs device truth after each of {len(cand.audits)} steps",
                 Verdict.REGRESSION if len(bad) > th.audit_violations else Verdict.PASS, note,
                 delta_kind=DeltaKind.NONE,
                 bar=Bar(kind=BarKind.MAX_VALUE, value=th.audit_violations))
