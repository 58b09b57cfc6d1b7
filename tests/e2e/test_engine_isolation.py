"""Every engine runs in its own process: one that segfaults or exits is a recorded failure
(exit 3) and the run's other workloads still report. One killed from outside (SIGKILL) and
one that hangs (the watchdog's case) are in test_machine_faults.py, with the other faults
of the machine."""
import pytest
from markupsafe import escape
from support.side_by_side import run_variants

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


MODES = {"segv": "killed by signal SIGSEGV", "exit": "exit code 7"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A run whose candidate engine segfaults and one whose candidate engine exits, side by
    side (support.side_by_side: they judge records, never time); the engine processes load
    the "faulty" target from MRBENCH_TARGET_MODULES."""
    root = tmp_path_factory.mktemp("faulty")
    (root / "s.yaml").write_text(SUITE)
    return run_variants(root, root / "s.yaml",
                        {mode: ["--target", "faulty", "--candidate", mode, "--baseline",
                                "bundled:v1", "--timeout", "15"] for mode in MODES},
                        env={"MRBENCH_TARGET_MODULES": "support.engine_faults"})


@pytest.mark.parametrize("mode, words", MODES.items())
def test_a_dead_engine_is_a_recorded_failure(runs, mode, words):
    run = runs[mode]
    summary, out = run.summary, run.path
    assert run.code == 3 and summary["verdict"] == "error"
    [fail] = summary["failures"]
    assert (fail["workload"], fail["side"]) == ("broken", "candidate")
    assert words in fail["error"], fail["error"]
    assert {c["workload"] for c in summary["checks"]} == {"ok"}
    report = (out / "report.html").read_text()
    assert "broken" in report
    hint = hint_for(fail["error"])                   # its own, not the catch-all
    assert hint != OTHER and escape(hint.happened) in report and escape(hint.to_try) in report
    assert "FAILED broken (candidate)" in run.out
