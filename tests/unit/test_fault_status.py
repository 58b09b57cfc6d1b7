"""faults.json is one typed record (campaign_record.FaultMatrix): a fault run that flagged
nothing because an engine failed measured nothing, so the matrix says "not measured" (with
the failure), never "missed"; the table, the report and the markdown summary agree, and a
file that is not a fault matrix is one line where it is read."""
import json

import pytest

from mrbench.contract import BadInput
from mrbench.harness.record.campaign_record import FaultMatrix, FaultRun, read_fault_matrix
from mrbench.harness.show.campaign_report import _matrix
from mrbench.harness.show.markdown import faults_markdown

FAILED = [dict(workload="gsm8k-pd-eagle", side="baseline",
               error="RuntimeError: the PD pair's prefill engine failed in a step: boom")]


def _res(**faults) -> dict:
    return dict(suite="pd-eagle", clean=dict(verdict="error", false_alarms=0, flagged=[],
                                             exit=3, failures=FAILED),
                faults={n: dict(verdict="pass", exit=0, **r) for n, r in faults.items()})


def _run(**r) -> FaultRun:
    return FaultRun(verdict="pass", exit=0, **r)


def test_caught_missed_and_not_measured_are_told_apart():
    assert _run(caught=True, by=["x/token_agreement"]).status == "caught"
    assert _run(caught=False).status == "missed"
    assert _run(caught=False, failures=FAILED).status == "not measured"
    # a check that fired still counts, even if another workload failed
    assert _run(caught=True, by=["x/y"], failures=FAILED).status == "caught"
    # derived, whatever an older or edited file says
    assert FaultRun.model_validate(dict(caught=False, verdict="pass", exit=0,
                                        status="caught")).status == "missed"


def test_the_report_and_the_summary_say_not_measured(tmp_path):
    res = _res(**{"stale-slot-state": dict(caught=False, by=[], failures=FAILED),
                  "seq-lens-sync": dict(caught=False, by=[], failures=[])})
    rows = {r["name"]: r["status"] for r in _matrix(FaultMatrix.model_validate(res))["rows"]}
    assert rows["stale-slot-state"] == "NOT MEASURED" and rows["seq-lens-sync"] == "MISSED"
    (tmp_path / "faults.json").write_text(json.dumps(res))
    md = faults_markdown(tmp_path)
    assert "| stale-slot-state | **not measured** |" in md
    assert "| seq-lens-sync | **missed** |" in md


def test_the_matrix_reads_back_as_written_and_refuses_what_is_not_one(tmp_path):
    m = FaultMatrix.model_validate(_res(**{"seq-lens-sync": dict(caught=True,
                                                                 by=["g/syncs_per_step"])}))
    (tmp_path / "faults.json").write_text(json.dumps(m.to_json_dict()))
    assert read_fault_matrix(tmp_path) == m
    assert m.to_json_dict()["faults"]["seq-lens-sync"]["status"] == "caught"
    (tmp_path / "faults.json").write_text(json.dumps(dict(suite="q", clean={}, faults={})))
    with pytest.raises(BadInput, match="faults.json is not a fault matrix .clean.verdict"):
        read_fault_matrix(tmp_path)


def test_a_check_that_alarmed_clean_does_not_catch_a_fault():
    """The clean run's false alarms cannot show a fault: a fault run flagged only where the
    clean run was flagged too is a miss, and those checks are listed apart (seen on vLLM
    0.26: V2 with FlashInfer syncs every step, so `syncs_per_step` alarmed clean and with
    a fault alike)."""
    from mrbench.harness.campaigns.faults import fault_run
    from mrbench.harness.record.run_record import RunSummary

    def summary(*regressed):
        checks = [dict(workload=w, metric=m, verdict="regression") for w, m in
                  (c.split("/") for c in regressed)]
        checks.append(dict(workload="gsm8k", metric="token_agreement", verdict="pass"))
        return RunSummary.model_validate(dict(verdict="regression" if regressed else "pass",
                                              checks=checks))
    alarms = {"gsm8k@FLASHINFER/syncs_per_step"}
    only_old = fault_run(summary("gsm8k@FLASHINFER/syncs_per_step"), 1, "f", alarms)
    assert (only_old.caught, only_old.status, only_old.by) == (False, "missed", [])
    assert only_old.alarmed_clean == ["gsm8k@FLASHINFER/syncs_per_step"]
    new = fault_run(summary("gsm8k@FLASHINFER/syncs_per_step",
                            "gsm8k@FLASHINFER/token_agreement"), 1, "f", alarms)
    assert (new.caught, new.by) == (True, ["gsm8k@FLASHINFER/token_agreement"])
    m = FaultMatrix.model_validate(dict(
        suite="backends", clean=dict(verdict="regression", false_alarms=1,
                                     flagged=sorted(alarms), exit=1),
        faults={"flashinfer-pinned-buffers": only_old.to_json_dict()}))
    assert FaultMatrix.model_validate(m.to_json_dict()) == m


def test_the_report_shows_a_clean_alarm_apart_in_the_fault_row(tmp_path):
    from mrbench.harness.show.campaign_report import render_campaign
    res = FaultMatrix.model_validate(dict(
        suite="backends", clean=dict(verdict="regression", false_alarms=1,
                                     flagged=["g@FLASHINFER/syncs_per_step"], exit=1),
        faults={"flashinfer-pinned-buffers": dict(
            caught=False, by=[], alarmed_clean=["g@FLASHINFER/syncs_per_step"],
            verdict="regression", exit=1, dir="flashinfer-pinned-buffers")}))
    rows = {r["name"]: r for r in _matrix(res)["rows"]}
    assert rows["clean"]["hits"] == ["hit"]
    assert rows["flashinfer-pinned-buffers"]["hits"] == ["also"]
    assert rows["flashinfer-pinned-buffers"]["status"] == "MISSED"
    html = render_campaign(tmp_path, "faults", res).read_text()
    assert 'class="also" title="alarmed in the clean run too: not counted"' in html
    md = faults_markdown_of(tmp_path, res)
    assert "not counted, alarmed clean too: g@FLASHINFER/syncs_per_step" in md


def faults_markdown_of(tmp_path, res) -> str:
    (tmp_path / "faults.json").write_text(json.dumps(res.to_json_dict()))
    return faults_markdown(tmp_path)
