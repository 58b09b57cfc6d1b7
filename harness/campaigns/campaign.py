"""What every campaign shares: many runs of one suite, judged together (`faults.py`, the
fault catch matrix; `calibrate.py`, A/A calibration; `power.py`, the slow-step ruler), each
writing one directory (the runs, plus its result: faults.json, calibration.json or
power.json, a typed record of harness/record, written by campaign_record.write_result
alone), renamed into place only when complete; the command renders the reports once it is
there. A campaign cut off or run in pieces is judged from its finished runs by the same
aggregates (`read_back.py`).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, TypeVar

from mrbench.contract import BadInput

from ..record.campaign_record import CampaignResult, write_result
from ..record.results import check_out
from ..record.run_record import Check, RunSummary, Verdict
from ..record.suite import Suite
from ..run import interrupts
from ..run.engines.bank import EngineBank
from ..run.orchestrate import Isolation, Overrides, run_suite
from ..run.targets.base import SideSpec


def check_name(c: Check) -> str:
    return f"{c.workload}/{c.metric}"


def flagged(summary: RunSummary) -> list[str]:
    return sorted(check_name(c) for c in summary.checks if c.verdict == Verdict.REGRESSION)


class Campaign:
    """A hidden directory that becomes `out` only when every run in it is done, and the
    engines its runs share: while a run leaves both sides of a shape unchanged (an A/A
    calibration), their engines are started once and serve the next run too; a run that
    changes one side (a fault, the ruler) starts both again, so that no engine kept across
    runs is measured against a fresh one (harness.run.engines.bank)."""

    def __init__(self, out: Path, isolation: Isolation | None = None) -> None:
        check_out(out)
        self.isolation = isolation
        self.out = out
        out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        self.bank = EngineBank((isolation or Isolation()).bank_settings())

    def run(self, name: str, suite: Suite, base: SideSpec, cand: SideSpec,
            overrides: Overrides, log=None) -> tuple[RunSummary, int]:
        summary, code, _ = run_suite(suite, base, cand, overrides, self.tmp / name, log,
                                     isolation=self.isolation, bank=self.bank)
        if interrupts.caught():        # held while that run was written: it stops the campaign
            raise KeyboardInterrupt(interrupts.caught())
        return summary, code

    def commit(self, res: CampaignResult) -> Path:
        self.bank.shutdown()
        write_result(self.tmp, res)
        if self.out.exists():
            self.out.rmdir()
        os.replace(self.tmp, self.out)
        return self.out

    def abandon(self) -> None:
        self.bank.kill_all()
        self.bank.shutdown()
        shutil.rmtree(self.tmp, ignore_errors=True)


R = TypeVar("R", bound=CampaignResult)


def guarded(out: Path, body: Callable[[Campaign], R],
             isolation: Isolation | None = None) -> tuple[R, Path]:
    """`body`'s result, written into the campaign's directory once every run is done (the
    file its record names), and the directory; nothing left behind when it fails."""
    camp = Campaign(out, isolation)
    try:
        res = body(camp)
        return res, camp.commit(res)
    except BaseException:
        camp.abandon()
        raise


def sides_of(s: RunSummary | None) -> dict:
    """A campaign result's target, baseline and candidate: its last run's (None without)."""
    return {k: None if s is None else getattr(s, k) for k in ("target", "baseline", "candidate")}


def one_comparison(runs: list[tuple[RunSummary, int]]) -> None:
    """BadInput (one line) unless every run compared the same suite, target, baseline and
    candidate: runs read back from several directories may mix studies, and their counts
    together would describe none of them (a campaign's own runs always pass)."""
    kinds = {(s.suite, s.target, s.baseline, s.candidate) for s, _ in runs}
    if len(kinds) > 1:
        raise BadInput("the runs are of different comparisons (suite, target, baseline, "
                       f"candidate): {sorted(map(str, kinds))}")
