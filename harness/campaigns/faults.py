"""`mrbench faults`: the suite clean (it must pass), then once per fault on the candidate
(harness/run/faults.py names each target's); the matrix says which checks flagged each
fault."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..record.campaign_record import CleanRun, FaultMatrix, FaultRun
from ..record.results import environment
from ..record.run_record import Environment, RunSummary
from ..record.suite import Suite
from ..run.orchestrate import Isolation, Overrides
from ..run.targets.base import SideSpec
from .campaign import Campaign, guarded, flagged


def run_dir_name(fault: str) -> str:
    """A fault's run directory: `slow-step:50` -> `slow-step-50` (a colon in a relative link
    reads as a URL scheme)."""
    return fault.replace(":", "-")


def fault_run(summary: RunSummary, code: int, run_dir: str,
              false_alarms: set[str]) -> FaultRun:
    """One fault's run judged against the clean run's: a check that flagged the clean run
    too (`false_alarms`) cannot show the fault, so it is kept apart and catches nothing."""
    hits = flagged(summary)
    by = [c for c in hits if c not in false_alarms]
    return FaultRun(caught=bool(by), by=by, alarmed_clean=[c for c in hits if c in false_alarms],
                    verdict=summary.verdict, exit=code, failures=summary.failures, dir=run_dir)


def fault_matrix(suite: Suite, base: SideSpec, cand: SideSpec, faults: list[str],
                 overrides: Overrides, out: Path, log=None,
                 isolation: Isolation | None = None,
                 not_run: dict[str, str] | None = None) -> tuple[FaultMatrix, Path]:
    """faults.json (campaign_record.FaultMatrix): the suite clean, then once per fault;
    `not_run`, the target's faults left out (nothing to catch)."""
    def body(camp: Campaign) -> FaultMatrix:
        clean, code = camp.run("clean", suite, base, replace(cand, faults=()), overrides, log)
        false_alarms = set(flagged(clean))
        runs: dict[str, FaultRun] = {}
        for f in faults:
            d = run_dir_name(f)
            s, code_f = camp.run(d, suite, base, replace(cand, faults=(f,)), overrides, log)
            runs[f] = fault_run(s, code_f, d, false_alarms)
        return FaultMatrix(
            suite=suite.name, target=clean.target, baseline=clean.baseline,
            candidate=clean.candidate,
            clean=CleanRun(verdict=clean.verdict, false_alarms=len(flagged(clean)),
                           flagged=flagged(clean), exit=code, failures=clean.failures),
            faults=runs, not_run=dict(not_run or {}),
            environment=Environment.model_validate(environment()))
    return guarded(out, body, isolation)
