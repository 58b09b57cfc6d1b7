"""`mrbench power`: the suite clean and with the slow-step ruler, several runs each; per
latency check the false-alarm rate, the detection rate per size, and the minimum
detectable effect. Real runs of a small blocked suite on the bundled model (V2 vs V2)."""
import json

import pytest
from support.suites import blocked_gsm8k

from mrbench.harness.cli import main

pytestmark = pytest.mark.slow

SUITE = blocked_gsm8k("tiny-power", "6 ABBA waves of 2 GSM8K problems, medians gated", waves=6,
                      max_tokens=48)


def test_power_reports_false_alarms_detection_and_the_mde(tmp_path, capsys):
    suite = tmp_path / "tiny.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "power"
    # in-process: this tests the study, not engine isolation (saves a spawn per side a run)
    code = main(["power", str(suite), "-n", "2", "--pcts", "200", "--out", str(out),
                 "--in-process"])
    assert code == 0
    res = json.loads((out / "power.json").read_text())
    assert res["baseline"].endswith("v2") and res["candidate"].endswith("v2")
    assert res["pcts"] == [200.0] and res["n"] == 2
    med = res["checks"]["gsm8k/median_step_ms"]
    assert med["judged"] and med["detection"]["200"]["rate"] == 1.0 and med["mde_pct"] == 200
    assert 0 <= med["false_alarm_rate"] <= 1 and len(med["false_alarm_ci"]) == 2
    # the slowed runs changed latency only: tokens equal to the clean side's
    for r in res["runs"]:
        assert not [f for f in r["flagged"] if "token_agreement" in f or "accuracy" in f], r
    assert len(list(out.glob("slow200-*/summary.json"))) == 2
    html = (out / "report.html").read_text()
    assert 'id="power-table"' in html and "power curve" in html and 'id="realized"' in html
    assert "MDE" in capsys.readouterr().out
    # read back from its runs (as a study cut off or run in pieces is): the same result
    back = tmp_path / "back"
    assert main(["power", str(suite), "--from-runs", str(out), "--out", str(back)]) == 0
    again = json.loads((back / "power.json").read_text())
    assert again.pop("read_back") == {"dirs": [str(out)], "waves": None}

    def unordered(rows: list[dict]) -> list[str]:    # read in path order, not in turns
        return sorted(json.dumps(dict(r, run=None), sort_keys=True) for r in rows)
    assert unordered(again.pop("runs")) == unordered(res["runs"])
    assert again == {k: v for k, v in res.items() if k not in ("environment", "runs")}
    assert 'id="power-table"' in (back / "report.html").read_text()
    assert f"results: {back}" in capsys.readouterr().out


def test_power_refuses_bad_sizes_in_one_line(tmp_path, capsys):
    for pcts, words in (("x", "--pcts"), ("0", "PCT must be")):
        assert main(["power", "smoke", "--pcts", pcts, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
    assert not (tmp_path / "o").exists()
