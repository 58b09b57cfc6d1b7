"""calibration.json and power.json as typed records (record/study_record.py): the campaign's
aggregation builds the model, campaign_record.write_result writes it, read_calibration /
read_power_study read it back equal; the file keeps the layout it always had, a file
written before a field existed still reads, a file that is not one is refused in one line,
and docs/schema/ holds what `mrbench schema calibration|power` prints."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mrbench.contract import BadInput
from mrbench.harness.campaigns.calibrate import aggregate_calibration
from mrbench.harness.campaigns.power import aggregate_power
from mrbench.harness.campaigns.read_back import read_back_power
from mrbench.harness.cli import main
from mrbench.harness.record.campaign_record import write_result
from mrbench.harness.record.results import RESULTS_FORMAT
from mrbench.harness.record.run_record import RunSummary, RunVerdict, Verdict
from mrbench.harness.record.schemas import json_schema
from mrbench.harness.record.study_record import (
    Calibration,
    PowerStudy,
    read_calibration,
    read_power_study,
)
from mrbench.harness.record.suite import load_suite

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
SUITE = load_suite("gpu-quick:gsm8k")


def _summary(delta: float, faults=(), flags=()) -> RunSummary:
    """A run of gpu-quick's gsm8k entry: two latency checks with a CI, and token agreement
    (judged, no CI); `flags` names the metrics it flagged."""
    checks = [dict(workload="gsm8k", metric=m, delta=delta + i / 500,
                   ci=[delta - 0.02, delta + 0.02], p_value=0.4, threshold="+3% and significant",
                   verdict=Verdict.REGRESSION if m in flags else Verdict.PASS)
              for i, m in enumerate(("median_step_ms", "p99_step_ms"))]
    checks.append(dict(workload="gsm8k", metric="token_agreement", candidate=1.0, delta=0.0,
                       threshold=">= 0.99", verdict=Verdict.PASS))
    return RunSummary.build(checks, [], suite="gpu-quick.gsm8k", target="bundled",
                            baseline="v2", candidate="v2", candidate_faults=list(faults),
                            wall_s=70.0)


def _clean() -> list[tuple[RunSummary, int]]:
    deltas = (-0.01, 0.004, 0.012, -0.006, 0.0, 0.009)
    return [(_summary(d, flags=("p99_step_ms",) if i == 2 else ()), int(i == 2))
            for i, d in enumerate(deltas)]


def _power_runs() -> list[tuple[RunSummary, int]]:
    ruler = [(_summary(0.06 + i / 100, ["slow-step:5"], ["median_step_ms"]), 1)
             for i in range(3)]
    return _clean() + ruler


def test_a_calibration_round_trips_build_write_read(tmp_path):
    res = aggregate_calibration(SUITE, _clean())
    assert isinstance(res, Calibration) and res.n == 6 and res.max_rate == pytest.approx(1 / 6)
    write_result(tmp_path, res)
    back = read_calibration(tmp_path)
    assert back == res
    p99 = back.checks["gsm8k/p99_step_ms"]
    assert (p99.false_alarms, p99.runs) == (1, 6) and p99.projection is not None
    assert p99.heterogeneity is not None and p99.exceedance is not None
    assert back.runs[2].verdict == RunVerdict.REGRESSION
    assert back.runs[0].estimates["gsm8k/median_step_ms"] == (-0.01, 0.4)
    assert back.checks["gsm8k/token_agreement"].projection is None    # not a latency check


def test_a_power_study_round_trips_build_write_read(tmp_path):
    res = aggregate_power(SUITE, _power_runs())
    assert isinstance(res, PowerStudy) and res.runs_per_plan == {"clean": 6, "5": 3}
    write_result(tmp_path, res)
    back = read_power_study(tmp_path)
    assert back == res
    med = back.checks["gsm8k/median_step_ms"]
    assert med.detection["5"].rate == 1.0 and med.mde_pct == 5.0 and med.bar == 0.03
    assert back.realized_pct["5"]["median_step_ms"] == pytest.approx(7.0)
    assert [r.plan for r in back.runs] == ["clean"] * 6 + ["slow-step:5"] * 3


def test_a_read_back_study_records_where_its_runs_came_from(tmp_path):
    for i, (s, _) in enumerate(_power_runs()):
        d = tmp_path / "runs" / f"r{i:02d}"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps(s.to_json_dict()))
    res = read_back_power([tmp_path / "runs"], SUITE, None)
    write_result(tmp_path / "runs", res)
    data = json.loads((tmp_path / "runs" / "power.json").read_text())
    assert data["read_back"] == {"dirs": [str(tmp_path / "runs")], "waves": None}
    assert "environment" not in data and data["results_format"] == RESULTS_FORMAT
    assert read_power_study(tmp_path / "runs") == res


def test_the_files_keep_their_layout_and_match_their_schema(tmp_path):
    """The names and nesting the dicts had: a reader of the files (a script, a notebook)
    reads them as before, and the published schema accepts what is written."""
    cal = aggregate_calibration(SUITE, _clean()).file_json()
    assert set(cal) == {"results_format", "suite", "target", "baseline", "candidate", "n",
                        "runs", "checks", "max_rate", "errors", "method"}
    assert set(cal["runs"][0]) == {"run", "verdict", "exit", "flagged", "failures",
                                   "estimates"}
    assert set(cal["checks"]["gsm8k/p99_step_ms"]) == {
        "runs", "false_alarms", "rate", "rate_ci", "judged", "threshold", "delta_median",
        "delta_max", "delta_min", "deltas", "ci_hi_max", "projection", "heterogeneity",
        "exceedance"}
    assert cal["checks"]["gsm8k/token_agreement"]["projection"] is None   # null, as before
    assert cal["runs"][0]["estimates"]["gsm8k/median_step_ms"] == [-0.01, 0.4]
    pw = aggregate_power(SUITE, _power_runs()).file_json()
    assert list(pw["runs"][0]) == ["plan", "run", "verdict", "exit", "flagged", "failures",
                                   "wall_s", "estimates"]
    assert set(pw["checks"]["gsm8k/median_step_ms"]) == {
        "threshold", "bar", "judged", "false_alarms", "aa_runs", "false_alarm_rate",
        "false_alarm_ci", "detection", "mde_pct", "projection", "heterogeneity",
        "exceedance"}
    assert set(pw["checks"]["gsm8k/median_step_ms"]["detection"]["5"]) == {
        "detected", "runs", "rate", "rate_ci"}
    jsonschema = pytest.importorskip("jsonschema")     # not a declared dependency
    jsonschema.validate(cal, json_schema("calibration"))
    jsonschema.validate(pw, json_schema("power"))


def test_files_written_before_the_newer_fields_still_read(tmp_path):
    """A calibration.json of the first calibrate (no results_format, no per-run estimates,
    no projection or readings) and a power.json of the first power study (no bar, no
    realized_pct, ruler_added_pct or readings) read, with those fields at their defaults."""
    (tmp_path / "calibration.json").write_text(json.dumps(dict(
        suite="quick", target="bundled", baseline="v1", candidate="v1", n=1,
        runs=[dict(run=0, verdict="pass", exit=0, flagged=[], failures=0)],
        checks={"g/p99_step_ms": dict(runs=1, false_alarms=0, rate=0.0, rate_ci=[0.0, 0.79],
                                      judged=1, threshold="+5%", delta_median=0.01,
                                      delta_max=0.01, delta_min=0.01, deltas=[0.01],
                                      ci_hi_max=0.03)},
        max_rate=0.0, errors=0, method="every regression verdict ...",
        environment=dict(python="3.12.3"))))
    cal = read_calibration(tmp_path)
    assert cal.results_format == RESULTS_FORMAT and cal.runs[0].estimates == {}
    c = cal.checks["g/p99_step_ms"]
    assert c.projection is None and c.heterogeneity is None and c.exceedance is None
    assert cal.environment.python == "3.12.3" and cal.read_back is None
    (tmp_path / "power.json").write_text(json.dumps(dict(
        suite="gpu-quick.gsm8k", target="bundled", baseline="v2", candidate="v2", n=1,
        runs_per_plan={"clean": 1, "10": 1}, pcts=[10.0], power_target=0.8,
        runs=[dict(plan="clean", run=0, verdict="pass", exit=0, flagged=[], failures=0,
                   wall_s=70.0, estimates={"gsm8k/median_step_ms": [0.01, 0.5]})],
        checks={"gsm8k/median_step_ms": dict(
            threshold="+3%", judged=True, false_alarms=0, aa_runs=1, false_alarm_rate=0.0,
            false_alarm_ci=[0.0, 0.79],
            detection={"10": dict(detected=1, runs=1, rate=1.0, rate_ci=[0.21, 1.0])},
            mde_pct=10.0, projection=None)},
        errors=0, method="clean runs: ...", results_format=1)))
    pw = read_power_study(tmp_path)
    c = pw.checks["gsm8k/median_step_ms"]
    assert c.bar is None and c.heterogeneity is None and c.exceedance is None
    assert pw.realized_pct == {} and pw.ruler_added_pct == {}
    assert pw.runs[0].estimates["gsm8k/median_step_ms"] == (0.01, 0.5)


@pytest.mark.parametrize("reader, name, edit, words", [
    (read_calibration, "calibration.json", lambda d: d.update(n="many"),
     "calibration.json is not a calibration (n: "),
    (read_calibration, "calibration.json",
     lambda d: d["checks"]["gsm8k/p99_step_ms"].update(rate_ci=[0.1]),
     "calibration.json is not a calibration (checks.gsm8k/p99_step_ms.rate_ci.1: Field "
     "required)"),
    (read_power_study, "power.json", lambda d: d["runs"][1].update(verdict="maybe"),
     "power.json is not a power study (runs.1.verdict: "),
    (read_power_study, "power.json", lambda d: d.pop("power_target"),
     "power.json is not a power study (power_target: Field required)"),
    (read_power_study, "power.json", lambda d: d.update(results_format=RESULTS_FORMAT + 1),
     f"results format {RESULTS_FORMAT + 1} is newer than this mrbench reads"),
])
def test_a_file_with_a_bad_field_is_refused_in_one_line(tmp_path, reader, name, edit, words):
    res = (aggregate_calibration(SUITE, _clean()) if name == "calibration.json"
           else aggregate_power(SUITE, _power_runs()))
    data = res.file_json()
    edit(data)
    (tmp_path / name).write_text(json.dumps(data))
    with pytest.raises(BadInput) as e:
        reader(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{tmp_path}: ") and words in msg, msg


@pytest.mark.parametrize("reader, words", [
    (read_calibration, "is not a results directory (no calibration.json)"),
    (read_power_study, "is not a results directory (no power.json)"),
])
def test_a_missing_file_is_refused_in_one_line(tmp_path, reader, words):
    with pytest.raises(BadInput, match=r"^[^\n]*" + words.replace("(", r"\(")
                       .replace(")", r"\)") + "$"):
        reader(tmp_path)


@pytest.mark.parametrize("which", ["calibration", "power"])
def test_the_schema_command_prints_the_committed_schema(which, capsys):
    """docs/schema/ holds `mrbench schema WHICH`; regenerate it when a model changes:
    `mrbench schema calibration > docs/schema/calibration.schema.json` (and power)."""
    assert main(["schema", which]) == 0
    out = capsys.readouterr().out
    committed = (ROOT / "docs" / "schema" / f"{which}.schema.json").read_text()
    assert out == committed, f"docs/schema/{which}.schema.json is stale"
    assert json.loads(out)["title"] == {"calibration": "Calibration",
                                        "power": "PowerStudy"}[which]
