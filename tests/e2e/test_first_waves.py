"""harness.regate.first_waves: a stored run re-judged by the gate on its first N waves, so
that a study at many waves also says what fewer would have shown. On all its waves it must
give back the run's own checks; on fewer, the checks say so; more than it ran is refused.
A real run of a small blocked suite on the bundled model (V2 vs V2, the ruler on)."""
import json

import pytest
from support.suites import blocked_gsm8k

from mrbench.contract import BadInput
from mrbench.harness.checks.regate import first_waves
from mrbench.harness.cli import main
from mrbench.harness.record.run_record import RunVerdict

pytestmark = pytest.mark.slow

SUITE = blocked_gsm8k("tiny-waves", "8 ABBA waves of 2 GSM8K problems", waves=8, max_tokens=24)


def _judged(checks: list[dict]) -> dict:
    return {c["metric"]: (c["delta"], c["verdict"], c.get("method")) for c in checks}


def test_a_run_re_judged_on_its_first_waves(tmp_path, capsys):
    suite = tmp_path / "tiny.yaml"
    suite.write_text(SUITE)
    run = tmp_path / "run"
    # in-process: this tests the re-judging, not engine isolation (saves a spawn per side)
    code = main(["run", str(suite), "--baseline", "v2", "--candidate", "v2",
                 "--fault", "slow-step:200", "--out", str(run), "--in-process"])
    assert code in (0, 1)           # the verdict is not what this tests (a busy machine
                                    # makes the latency checks "not measured")
    recorded = json.loads((run / "summary.json").read_text())
    # all eight waves: the run's own checks, every one
    again = first_waves(run, 8).to_json_dict()       # as summary.json would hold it
    assert _judged(again["checks"]) == _judged(recorded["checks"])
    assert again["candidate_faults"] == ["slow-step:200"] and again["waves"] == 8
    # six waves (the fewest a median is judged on): judged on those alone
    six = {c["metric"]: c for c in first_waves(run, 6).to_json_dict()["checks"]}
    step = six["median_step_ms"]
    assert "over 6 ABBA waves" in step["method"] and step["delta"] > 0.5   # the ruler, +200 %
    assert step["delta"] != _judged(recorded["checks"])["median_step_ms"][0]
    with pytest.raises(BadInput, match="ran 8 waves .* fewer than 9"):
        first_waves(run, 9)
    # the power study's read-back takes --waves, and judges each run's verdict anew
    assert first_waves(run, 6).verdict in (RunVerdict.PASS, RunVerdict.REGRESSION,
                                           RunVerdict.ERROR)
    capsys.readouterr()
    assert main(["power", "tiny-waves", "--from-runs", str(tmp_path), "--waves", "6"]) == 2
    assert "tiny-waves" in capsys.readouterr().err                   # not a suite
    out = tmp_path / "power-6"
    code = main(["power", str(suite), "--from-runs", str(tmp_path), "--waves", "6",
                 "--out", str(out)])
    assert code in (0, 3)          # 3: a latency check "not measured" on a busy machine
    assert "+200 % 1" in capsys.readouterr().out
    assert json.loads((out / "power.json").read_text())["read_back"]["waves"] == 6
    assert main(["power", str(suite), "--from-runs", str(tmp_path), "--waves", "9"]) == 2
    assert "fewer than 9" in capsys.readouterr().err
    assert main(["power", str(suite), "--from-runs", str(tmp_path), "--waves", "0"]) == 2
    assert "at least 1" in capsys.readouterr().err
