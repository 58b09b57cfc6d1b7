"""Every engine runs in its own process: one that segfaults or exits is a recorded failure
(exit 3) and the run's other workloads still report. One killed from outside (SIGKILL) and
one that hangs (the watchdog's case) are in test_machine_faults.py, with the other faults
of the machine."""
import json

import pytest
import support.engine_faults  # noqa: F401  (registers the "faulty" target in this process)
from markupsafe import escape

from mrbench.harness.cli import main
from mrbench.harness.show.failure_hints import OTHER, hint_for

pytestmark = pytest.mark.slow       # harness runs with engines: CI runs them

SUITE = """name: faulty
workloads:
  - id: ok
    workload: gsm8k
    params: {limit: 2, max_num_seqs: 2, profile_limit: 1, max_tokens: 24, state_audit: false}
  - id: broken
    workload: gsm8k
    params: {limit: 2, max_num_seqs: 3, profile_limit: 1, max_tokens: 24, state_audit: false}
"""


@pytest.mark.parametrize("mode, words", [
    ("segv", "killed by signal SIGSEGV"),
    ("exit", "exit code 7"),
])
def test_a_dead_engine_is_a_recorded_failure(tmp_path, capsys, monkeypatch, mode, words):
    monkeypatch.setenv("MRBENCH_TARGET_MODULES", "support.engine_faults")   # engine processes load it
    (tmp_path / "s.yaml").write_text(SUITE)
    out = tmp_path / "run"
    code = main(["run", str(tmp_path / "s.yaml"), "--target", "faulty", "--candidate", mode,
                 "--baseline", "bundled:v1", "--timeout", "15", "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    assert code == 3 and summary["verdict"] == "error"
    [fail] = summary["failures"]
    assert (fail["workload"], fail["side"]) == ("broken", "candidate")
    assert words in fail["error"], fail["error"]
    assert {c["workload"] for c in summary["checks"]} == {"ok"}
    report = (out / "report.html").read_text()
    assert "broken" in report
    hint = hint_for(fail["error"])                   # its own, not the catch-all
    assert hint != OTHER and escape(hint.happened) in report and escape(hint.to_try) in report
    assert "FAILED broken (candidate)" in capsys.readouterr().out
