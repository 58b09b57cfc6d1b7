"""faults.json: the catch matrix `mrbench faults` writes, as one typed record.

One model, one writer (campaign.fault_matrix), one reader (`read_fault_matrix`): the
command's table, the campaign's report.html, `mrbench report --markdown` and the nightly
job read the same fields, and a file that is not a fault matrix is refused in one line
where it is read, not as a KeyError in a template.
"""
from __future__ import annotations

import enum
from pathlib import Path

from pydantic import model_validator


from .results import RESULTS_FORMAT, read_campaign, validated
from .run_record import Environment, Failure, RunVerdict, _Record


class FaultStatus(enum.StrEnum):
    """What a fault run showed. A run that flagged nothing because a side failed measured
    nothing: it did not miss."""

    CAUGHT = "caught"
    MISSED = "missed"
    NOT_MEASURED = "not measured"


class CleanRun(_Record):
    """The suite with no fault on the candidate: each check it flagged is a false alarm."""

    verdict: RunVerdict
    false_alarms: int
    flagged: list[str] = []
    exit: int
    failures: list[Failure] = []


class FaultRun(_Record):
    """The suite with one fault (or ruler setting) on the candidate: the checks that
    flagged it (`by`), and the run's directory inside the campaign (`dir`)."""

    omit_none = frozenset({"dir"})

    caught: bool
    by: list[str] = []
    verdict: RunVerdict
    exit: int
    failures: list[Failure] = []
    dir: str | None = None
    status: FaultStatus | None = None      # derived from caught and failures (set on build)

    @model_validator(mode="after")
    def _derive_status(self) -> FaultRun:
        # written by every mrbench since the field exists; derived for an older file
        self.status = (FaultStatus.CAUGHT if self.caught else
                       FaultStatus.NOT_MEASURED if self.failures else FaultStatus.MISSED)
        return self


class FaultMatrix(_Record):
    """faults.json. `not_run`: the target's faults left out, each with why (nothing to
    catch on the installed release); `results_format` is stamped by the writer."""

    omit_none = frozenset({"environment"})

    results_format: int = RESULTS_FORMAT
    suite: str
    target: str | None = None
    baseline: str | None = None
    candidate: str | None = None
    clean: CleanRun
    faults: dict[str, FaultRun] = {}
    not_run: dict[str, str] = {}
    environment: Environment | None = None

    def runs(self) -> list[CleanRun | FaultRun]:
        """The clean run, then each fault's, in the order they ran."""
        return [self.clean, *self.faults.values()]

    def all_caught_without_false_alarms(self) -> bool:
        return self.clean.false_alarms == 0 and all(r.caught for r in self.faults.values())

    def any_failed(self) -> bool:
        return any(r.failures for r in self.runs())


def read_fault_matrix(camp_dir: Path) -> FaultMatrix:
    """faults.json under `camp_dir`, its format checked (read_campaign); BadInput in one
    line when it is missing, corrupt, newer, or not a fault matrix."""
    return validated(FaultMatrix, read_campaign(camp_dir, "faults.json"), camp_dir,
                     "faults.json", "a fault matrix")
