"""`mrbench calibrate` on a tiny suite: the A/A runs, the per-check false-alarm table, the
campaign report, and atomic output."""
import json

import pytest
from support.suites import TINY

from mrbench.harness.cli import main

pytestmark = pytest.mark.slow       # harness runs with engines: CI runs them


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    root = tmp_path_factory.mktemp("cal")
    (root / "tiny.yaml").write_text(TINY)
    # in-process: this tests the campaign, not engine isolation (saves a spawn per side)
    code = main(["calibrate", str(root / "tiny.yaml"), "-n", "2", "--out", str(root / "c"),
                 "--in-process"])
    return code, root / "c"


def test_calibration_json(calibration):
    code, out = calibration
    res = json.loads((out / "calibration.json").read_text())
    assert res["n"] == 2 and res["baseline"] == res["candidate"] == "v1"
    assert [r["run"] for r in res["runs"]] == [0, 1]
    checks = res["checks"]
    assert {"g/token_agreement", "g/accuracy_strict", "g/syncs_per_step"} <= set(checks)
    for name, c in checks.items():
        assert c["runs"] == 2 and 0 <= c["rate"] <= 1 and c["rate_ci"][0] <= c["rate"]
    # an engine against itself: identical tokens, identical accuracy
    assert checks["g/token_agreement"]["false_alarms"] == 0
    assert checks["g/accuracy_strict"]["delta_max"] == 0
    # a projection is for latency checks judged with a CI; each run keeps its estimates
    assert checks["g/token_agreement"]["projection"] is None
    assert all("estimates" in r for r in res["runs"])
    assert code == (0 if res["max_rate"] <= 0.10 else 1)
    for i in range(2):
        assert (out / f"run-{i:02d}" / "summary.json").is_file()


def test_calibration_report(calibration):
    _, out = calibration
    html = (out / "report.html").read_text()
    assert 'id="calibration-table"' in html and "g/token_agreement" in html
    assert "http://" not in html and "https://" not in html
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".c.")]   # no temp left
    for i in range(2):          # each run's report, rendered once the campaign was in place
        run = out / f"run-{i:02d}"
        assert f'href="run-{i:02d}/report.html"' in html
        sub = (run / "report.html").read_text()
        assert f"run directory: <code>{run}</code>" in sub and "/.c." not in sub


def test_calibration_read_back_from_its_runs_is_the_campaigns_own(calibration, capsys):
    """`calibrate --from-runs` over a finished campaign's directory gives back the campaign's
    result and exit code: the same aggregation of the same runs (a cut-off one is read the
    same way, from its hidden directory)."""
    code, out = calibration
    capsys.readouterr()
    again = main(["calibrate", str(out.parent / "tiny.yaml"), "--from-runs", str(out),
                  "--json"])
    res = json.loads(capsys.readouterr().out)
    want = json.loads((out / "calibration.json").read_text())
    assert again == code and res.pop("read_back") == {"dirs": [str(out)], "waves": None}
    assert res == {k: v for k, v in want.items() if k != "environment"}
