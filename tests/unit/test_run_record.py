"""The run record's types (harness/record/run_record.py): verdicts are StrEnums whose values are the
JSON strings, so what is written is unchanged and what is read back compares equal; and no
verdict is spelt as a bare literal outside that module again."""
import json
import re
from pathlib import Path

from mrbench.harness.record.run_record import Check, RunVerdict, Verdict

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())


def _check(verdict: Verdict) -> Check:
    return Check("w", "p99_step_ms", "ms", 1.0, 2.0, 1.0, [0.5, 1.5], 0.01, "+25%",
                 "test", verdict, "note")


def test_a_check_serializes_its_verdict_as_the_plain_string():
    d = _check(Verdict.REGRESSION).to_dict()
    assert json.dumps(d["verdict"]) == '"regression"'
    assert json.loads(json.dumps(d))["verdict"] == "regression"
    # byte for byte what the bare string gave before
    assert json.dumps(d, indent=2) == json.dumps(dict(d, verdict="regression"), indent=2)
    assert json.dumps(dict(verdict=RunVerdict.IMPORTED)) == '{"verdict": "imported"}'


def test_a_verdict_read_back_from_json_compares_equal_to_its_member():
    back = json.loads(json.dumps(_check(Verdict.REGRESSION).to_dict()))
    assert type(back["verdict"]) is str
    assert back["verdict"] == Verdict.REGRESSION
    assert back["verdict"] in (Verdict.PASS, Verdict.REGRESSION)
    assert back["verdict"] != Verdict.PASS
    assert Verdict(back["verdict"]) is Verdict.REGRESSION
    assert f"{Verdict.REGRESSION}" == str(Verdict.REGRESSION) == "regression"


def test_the_verdict_values_are_exactly_the_documented_sets():
    assert {v.value for v in Verdict} == {"pass", "regression", "info", "error"}
    # an interrupted run's verdict is "error", with the interrupt recorded beside it
    assert {v.value for v in RunVerdict} == {"pass", "regression", "error", "imported"}


def test_no_regression_literal_outside_run_record():
    """A verdict spelt as a bare string is a typo waiting to happen: name the member."""
    literal = re.compile(r"""["']regression["']""")
    sources = sorted((ROOT / "harness").rglob("*.py")) + sorted((ROOT / "scripts").rglob("*.py"))
    assert sources
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
             for p in sources if p.name != "run_record.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if literal.search(line)]
    assert found == []
