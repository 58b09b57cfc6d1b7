"""A campaign's result file, as one typed record: what every campaign result shares
(`CampaignResult`, its one writer `write_result` and its one reader `read_result`), and
faults.json, the catch matrix `mrbench faults` writes (`FaultMatrix`). calibration.json and
power.json are study_record's. What a fault is, and which ones each target offers, is the
fault registry's (harness/run/faults.py); this record keeps what each fault's run showed.

One model, one writer, one reader: the campaign builds the model, `write_result` writes
it (from `model_dump(mode="json")`), and the command's table, the campaign's report.html,
`mrbench report --markdown` and the nightly job read the same fields through `read_result`,
so a file that is not what it should be is refused in one line where it is read, not as
a KeyError in a template.
"""
from __future__ import annotations

import enum
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import model_validator

from .results import RESULTS_FORMAT, read_campaign, validated, write_json
from .run_record import Environment, Failure, RunVerdict, _Record, json_safe


class CampaignResult(_Record):
    """The file a campaign writes beside its runs (`filename`). `results_format` is
    stamped by the writer, so that a newer one is refused where it is read
    (results.read_campaign); a file without it is format 1. `what` names the file in the
    reader's one-line refusal ("... is not a fault matrix")."""

    filename: ClassVar[str]
    what: ClassVar[str]

    results_format: int = RESULTS_FORMAT

    def file_json(self) -> dict[str, Any]:
        """The record as its file holds it: `model_dump(mode="json")`, NaN as null."""
        return json_safe(self.model_dump(mode="json"))


R = TypeVar("R", bound=CampaignResult)


def write_result(camp_dir: Path, res: CampaignResult) -> Path:
    """The one writer of a campaign's result: `camp_dir`/`res.filename`, stamped with this
    mrbench's results format (a record read from an older file is the current layout once
    its model has read it). Returns the file's path."""
    path = Path(camp_dir) / res.filename
    write_json(path, res.model_copy(update={"results_format": RESULTS_FORMAT}).file_json())
    return path


def read_result(camp_dir: Path, model: type[R]) -> R:
    """The one reader of a campaign's result: `camp_dir`/`model.filename` as `model`, its
    format checked (read_campaign); BadInput in one line when it is missing, corrupt,
    newer, or not what it should be (the first field that does not fit)."""
    return validated(model, read_campaign(camp_dir, model.filename), Path(camp_dir),
                     model.filename, model.what)


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
    flagged it (`by`), and the run's directory inside the campaign (`dir`). A check that
    flagged the clean run too shows nothing about the fault: it is listed apart
    (`alarmed_clean`) and never counts as a catch."""

    omit_none = frozenset({"dir"})

    caught: bool
    by: list[str] = []
    alarmed_clean: list[str] = []
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


class FaultMatrix(CampaignResult):
    """faults.json. `not_run`: the target's faults left out, each with why (nothing to
    catch on the installed release); `results_format` is stamped by the writer."""

    filename = "faults.json"
    what = "a fault matrix"
    omit_none = frozenset({"environment"})

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
    return read_result(camp_dir, FaultMatrix)
