"""A run stopped by SIGTERM (a job's time limit) or by Ctrl-C (SIGINT to the process group,
engines included) is never lost and never half-written.

- During a workload: the finished workloads are written with their checks, the one in
  progress as a failure of both sides, the rest as not run; verdict "error", exit 130, the
  report rendered, no traceback.
- After the last workload (the engines closing, the results being committed): the results
  are written whole, and the run exits 130 saying they are complete.

The signal comes at a known point, never after a guessed time: the candidate is the
"faulty" stand-in target (tests/support/engine_faults.py), whose engine stops at the point
and writes a marker file; the test waits for the marker, signals, then lets the engine go on.
The run starts with SIGINT ignored, as every job that a non-interactive shell starts in the
background does (CI's runners among them): the harness must still take the Ctrl-C.
"""
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.side_by_side import JOBS, env_for
from support.suites import three_gsm8k

pytestmark = pytest.mark.slow       # harness runs with engines: CI runs them

ROOT = Path(__file__).resolve().parents[2]
SUITE = three_gsm8k()            # runs a, c, b: b (3 slots) is the faulty engine's workload
MODE = {"during": "pause", "after": "pause-close"}


def _interrupted_run(tmp_path: Path, how: str, when: str) -> tuple[int, str, str, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    suite = tmp_path / "three.yaml"
    suite.write_text(SUITE)
    out, err_path, marker = tmp_path / "run", tmp_path / "stderr.txt", tmp_path / "paused"
    env = env_for(dict(MRBENCH_TARGET_MODULES="support.engine_faults",
                       MRBENCH_TEST_PAUSE_FILE=str(marker)))
    # `trap "" INT; exec ...`: the run starts with SIGINT ignored, as every job that `cmd &`
    # in a non-interactive shell starts does (exec keeps an ignored signal ignored); a shell,
    # not preexec_fn, which is unsafe while other threads run (runs start side by side)
    cmd = [sys.executable, "-m", "mrbench", "run", str(suite), "--out", str(out), "--target",
           "faulty", "--candidate", MODE[when], "--baseline", "bundled:v1"]
    with err_path.open("w") as err:
        proc = subprocess.Popen(["/bin/sh", "-c", 'trap "" INT; exec "$@"', "sh", *cmd],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                start_new_session=True)
        deadline = time.monotonic() + 300
        while not marker.exists():                     # the engine is at the point
            assert proc.poll() is None and time.monotonic() < deadline, err_path.read_text()
            time.sleep(0.05)
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)           # the harness alone, as `timeout` does
        else:
            os.killpg(proc.pid, signal.SIGINT)          # every process of the group
        marker.unlink()                                # the engine goes on (if still alive)
        stdout, _ = proc.communicate(timeout=120)
    return proc.returncode, stdout, err_path.read_text(), out


CASES = [(how, when) for when in ("during", "after") for how in ("sigterm", "ctrl-c")]


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> dict[tuple[str, str], tuple[int, str, str, Path]]:
    """Every case's interrupted run, two at a time (support.side_by_side: these runs judge
    what is written, never time; the signal comes at a marker, never after a guessed time):
    (how, when) -> (exit code, stdout, stderr, results)."""
    root = tmp_path_factory.mktemp("interrupt")
    with ThreadPoolExecutor(JOBS) as pool:
        futures = {c: pool.submit(_interrupted_run, root / "-".join(c), *c) for c in CASES}
        return {c: f.result() for c, f in futures.items()}


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_an_interrupt_during_a_workload_keeps_the_workloads_that_finished(interrupted, how):
    code, stdout, err, out = interrupted[(how, "during")]
    assert code == 130, err
    assert "Traceback" not in err and "mrbench: interrupted: " in err
    summary = json.loads((out / "summary.json").read_text())
    left = summary["interrupted"]
    assert summary["verdict"] == "error"
    assert left == dict(during="b", finished=["a", "c"], not_run=[]), left
    assert {c["workload"] for c in summary["checks"]} == {"a", "c"}
    assert {(f["workload"], f["side"]) for f in summary["failures"]} == \
        {("b", "baseline"), ("b", "candidate")}
    assert 'id="interrupted"' in (out / "report.html").read_text()
    assert "verdict: error" in stdout
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".run.")]  # no temp left


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_an_interrupt_after_the_last_workload_writes_the_whole_run(interrupted, how):
    code, stdout, err, out = interrupted[(how, "after")]
    assert code == 130, err
    assert "Traceback" not in err
    assert f"after every workload finished: the results in {out} are complete" in err, err
    summary = json.loads((out / "summary.json").read_text())
    assert "interrupted" not in summary and not summary["failures"], summary["failures"]
    assert {c["workload"] for c in summary["checks"]} == {"a", "b", "c"}
    assert (out / "report.html").is_file() and (out / "manifest.json").is_file()
    assert f"verdict: {summary['verdict']}" in stdout
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".run.")]
