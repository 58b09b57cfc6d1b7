"""A run stopped by SIGTERM (a job's time limit) or by Ctrl-C (SIGINT to the process group,
engines included) writes what finished: the finished workloads with their checks, the
one in progress as a failure of both sides, the rest as not run, verdict "error", exit 130,
the report rendered, and no traceback. A nightly under `timeout` so keeps its work."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.suites import three_gsm8k

ROOT = Path(__file__).resolve().parents[2]
SUITE = three_gsm8k(c_limit=24, c_max_tokens=64)   # c: long enough to interrupt


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_an_interrupted_run_keeps_the_workloads_that_finished(tmp_path: Path, how: str):
    suite = tmp_path / "three.yaml"
    suite.write_text(SUITE)
    out, err_path = tmp_path / "run", tmp_path / "stderr.txt"
    with err_path.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "mrbench", "run", str(suite), "--out",
                                 str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=err,
                                text=True, start_new_session=True)
        deadline = time.monotonic() + 300
        while "a: " not in err_path.read_text() or "checks" not in err_path.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, err_path.read_text()
            time.sleep(0.2)
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)           # the harness alone, as `timeout` does
        else:
            os.killpg(proc.pid, signal.SIGINT)          # every process of the group
        stdout, _ = proc.communicate(timeout=120)
    err = err_path.read_text()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "mrbench: interrupted: " in err
    summary = json.loads((out / "summary.json").read_text())
    left = summary["interrupted"]
    assert summary["verdict"] == "error" and "a" in left["finished"]
    assert set(left["finished"]) | {left["during"]} - {None} | set(left["not_run"]) \
        == {"a", "b", "c"}
    assert {c["workload"] for c in summary["checks"]} == set(left["finished"])
    if left["during"]:
        assert {(f["workload"], f["side"]) for f in summary["failures"]} == \
            {(left["during"], "baseline"), (left["during"], "candidate")}
    assert 'id="interrupted"' in (out / "report.html").read_text()
    assert "verdict: error" in stdout
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run.")]  # no temp left
