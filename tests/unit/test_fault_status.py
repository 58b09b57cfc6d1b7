"""A fault run that flagged nothing because an engine failed measured nothing: the matrix
says "not measured" (with the failure), never "missed"; the table, the report and the
markdown summary agree."""
import json

from mrbench.harness.record.run_record import fault_status
from mrbench.harness.show.campaign_report import _matrix
from mrbench.harness.show.markdown import faults_markdown

FAILED = [dict(workload="gsm8k-pd-eagle", side="baseline",
               error="RuntimeError: the PD pair's prefill engine failed in a step: boom")]


def _res(**faults):
    return dict(suite="pd-eagle", clean=dict(verdict="error", false_alarms=0, flagged=[],
                                             failures=FAILED), faults=faults)


def test_caught_missed_and_not_measured_are_told_apart():
    assert fault_status(dict(caught=True, by=["x/token_agreement"], failures=[])) == "caught"
    assert fault_status(dict(caught=False, by=[], failures=[])) == "missed"
    assert fault_status(dict(caught=False, by=[], failures=FAILED)) == "not measured"
    # a check that fired still counts, even if another workload failed
    assert fault_status(dict(caught=True, by=["x/y"], failures=FAILED)) == "caught"


def test_the_report_and_the_summary_say_not_measured(tmp_path):
    res = _res(**{"stale-slot-state": dict(caught=False, by=[], failures=FAILED),
                  "seq-lens-sync": dict(caught=False, by=[], failures=[])})
    rows = {r["name"]: r["status"] for r in _matrix(res)["rows"]}
    assert rows["stale-slot-state"] == "NOT MEASURED" and rows["seq-lens-sync"] == "MISSED"
    (tmp_path / "faults.json").write_text(json.dumps(res))
    md = faults_markdown(tmp_path)
    assert "| stale-slot-state | **not measured** |" in md
    assert "| seq-lens-sync | **missed** |" in md
