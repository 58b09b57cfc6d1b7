"""Every engine runs in its own process: one that segfaults, exits or hangs is a recorded
failure (exit 3) and the run's other workloads still report."""
import json

import pytest
import support.engine_faults  # noqa: F401  (registers the "faulty" target in this process)

from mrbench.harness.cli import main

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
    ("hang", "did not answer 'generate' within 15 s"),
])
def test_a_dead_or_hung_engine_is_a_recorded_failure(tmp_path, capsys, monkeypatch, mode, words):
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
    assert "broken" in (out / "report.html").read_text()
    assert "FAILED broken (candidate)" in capsys.readouterr().out
