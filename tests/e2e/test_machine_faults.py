"""Faults of the machine under a real `mrbench run` (or `history add`), and what is on disk
after each: an engine killed from outside (the OOM killer's SIGKILL), a KV cache larger than
the memory free at start, a full disk while the results are committed (or after, at the
report), a broken model directory, an engine that stops answering, and a history write
killed mid-transaction.
Each recorded failure carries what happened and what to try (harness/show/failure_hints.py),
in report.html and in the terminal summary.

Every fault comes at a known point, never after a guessed time: the engine of the "faulty"
stand-in target (tests/support/engine_faults.py) and the history writer
(tests/support/history_writer.py) stop there and write their pid to a marker file; the test
acts, then lets them go on. Runs are tiny (2 prompts, 16 tokens, no profiled pass) so that
the module adds little to CI; the tests that start engines are `slow`.
"""
from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import support.engine_faults  # noqa: F401  (registers the "faulty" target in this process)
import torch
from safetensors.torch import load_file, save_file
from support.history_runs import write_run
from support.side_by_side import env_for

from mrbench.harness.cli import main
from mrbench.harness.record import history
from mrbench.harness.run.engines import worker
from mrbench.runner_impl.default_model import DEFAULT_MODEL_DIR
from mrbench.runner_impl.model.llama import kv_cache_bytes
from mrbench.runner_impl.model.loader import load_config

ROOT = Path(__file__).resolve().parents[2]
# each workload its own engine shape; broken's (3 slots) is the one the faulty target breaks
# (engine_faults.BREAK_AT_MAX_NUM_SEQS), so a run of all three goes ok, broken, after
SLOTS = dict(ok=2, broken=3, after=4)
WAIT_S = 300.0                                          # a safety net, never a measurement


def suite(*ids: str) -> str:
    """A GSM8K suite of these workloads, each 2 prompts of at most 16 tokens, no profiled
    pass (what these tests look at is the run's record, not its counts)."""
    return "name: machine-faults\nworkloads:\n" + "".join(
        f"  - {{id: {i}, workload: gsm8k, params: {{max_num_seqs: {SLOTS[i]}, limit: 2, "
        "profile_limit: 0, max_tokens: 16, state_audit: false}}\n" for i in ids)


def _run(tmp_path: Path, capsys, suite: str, *args: str) -> tuple[int, str, str, Path]:
    """`mrbench run` in this process on `suite`: (exit code, stdout, stderr, --out)."""
    path, out = tmp_path / "suite.yaml", tmp_path / "results" / "run"
    path.write_text(suite)
    code = main(["run", str(path), "--out", str(out), *args])
    cap = capsys.readouterr()
    return code, cap.out, cap.err, out


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _wait_for_pid(marker: Path, gone: Callable[[], bool]) -> int | None:
    """The pid a paused process wrote to `marker`, once it is there; None if `gone()` says
    first that it will not come, or the wait runs past WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while not gone() and time.monotonic() < deadline:
        text = marker.read_text().strip() if marker.exists() else ""
        if text:
            return int(text)
        time.sleep(0.05)
    return None


def _assert_hint(text: str, *needles: str) -> None:
    """The failure's hint, both what happened and what to try, is in `text`."""
    for n in needles:
        assert n in text, n


# ---- 1. an engine killed with SIGKILL during a workload (the OOM killer) ------------------

@pytest.fixture(scope="module")
def hung_run(tmp_path_factory):
    """A run whose candidate engine stops answering in `broken` (section 5), started in a
    process of its own before the module's other runs and waited for by its test: most of
    it is the watchdog's 15 s wait, in which they run (support.side_by_side: it judges what
    is recorded, never time). Yields a function: (exit code, stdout, stderr, results)."""
    tmp = tmp_path_factory.mktemp("hung")
    (tmp / "suite.yaml").write_text(suite("ok", "broken"))
    out = tmp / "results" / "run"
    cmd = [sys.executable, "-m", "mrbench", "run", str(tmp / "suite.yaml"), "--out", str(out),
           "--target", "faulty", "--candidate", "hang", "--baseline", "bundled:v1",
           "--timeout", "15"]
    with (tmp / "stdout").open("w") as o, (tmp / "stderr").open("w") as e:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=o, stderr=e,
                                env=env_for({"MRBENCH_TARGET_MODULES": "support.engine_faults"}))

    def finished() -> tuple[int, str, str, Path]:
        code = proc.wait(timeout=WAIT_S)
        return code, (tmp / "stdout").read_text(), (tmp / "stderr").read_text(), out
    try:
        yield finished
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory, hung_run) -> tuple[int, str, str, Path, int]:
    """The three-workload run whose candidate engine is SIGKILLed from outside while it
    serves `broken`: (exit code, stdout, stderr, results, the killed pid). Module-scoped:
    the history test adds its results too. The hung run goes on beside it."""
    tmp = tmp_path_factory.mktemp("killed")
    marker = tmp / "paused"
    mp = pytest.MonkeyPatch()
    mp.setenv("MRBENCH_TARGET_MODULES", "support.engine_faults")   # engine processes load it
    mp.setenv("MRBENCH_TEST_PAUSE_FILE", str(marker))
    stop, killed = threading.Event(), []

    def kill_when_paused() -> None:
        pid = _wait_for_pid(marker, stop.is_set)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)              # as the OOM killer does
            killed.append(pid)
            marker.unlink()
    killer = threading.Thread(target=kill_when_paused, daemon=True)
    killer.start()
    out, stdout, stderr = tmp / "results" / "run", io.StringIO(), io.StringIO()
    (tmp / "suite.yaml").write_text(suite("ok", "broken", "after"))
    try:                           # capsys is a test's: a module's fixture captures its own
        with redirect_stdout(stdout), redirect_stderr(stderr):
            code = main(["run", str(tmp / "suite.yaml"), "--target", "faulty", "--candidate",
                         "pause", "--baseline", "bundled:v1", "--out", str(out)])
    finally:
        stop.set()
        killer.join()
        mp.undo()
    assert killed, f"the engine never paused in broken; stderr:\n{stderr.getvalue()}"
    return code, stdout.getvalue(), stderr.getvalue(), out, killed[0]


@pytest.mark.slow
def test_an_engine_killed_by_sigkill_is_a_recorded_failure_and_the_run_goes_on(killed_run):
    code, stdout, stderr, out, pid = killed_run
    summary = _summary(out)
    assert code == 3 and summary["verdict"] == "error", stderr
    [fail] = summary["failures"]
    assert (fail["workload"], fail["side"]) == ("broken", "candidate")
    assert "engine process died during 'generate' (killed by signal SIGKILL)" in fail["error"]
    # the workload before it was judged, and the one after it ran on a new engine
    assert {c["workload"] for c in summary["checks"]} == {"ok", "after"}
    starts = json.loads((out / "manifest.json").read_text())["engines"]["starts"]
    after = [s for s in starts if s["side"] == "candidate" and s["workloads"] == ["after"]]
    assert after and after[0]["pid"] != pid, starts
    assert "interrupted" not in summary and not summary.get("unsupported")
    # what happened and what to try: in the report and in the terminal summary
    for text in ((out / "report.html").read_text(), stdout):
        _assert_hint(text, "killed with SIGKILL from outside it", "OOM killer",
                     "look for an OOM kill at that time")
    assert "FAILED broken (candidate)" in stdout
    assert "Traceback" not in stderr


# ---- 5. an engine that stops answering: the watchdog ends it ------------------------------

@pytest.mark.slow
def test_an_engine_that_stops_answering_is_ended_by_the_watchdog(hung_run):
    code, stdout, stderr, out = hung_run()
    summary = _summary(out)
    assert code == 3 and summary["verdict"] == "error", stderr
    [fail] = summary["failures"]
    assert (fail["workload"], fail["side"]) == ("broken", "candidate")
    assert ("did not answer 'generate' within 15 s (hung); its process was killed"
            in fail["error"]), fail["error"]
    assert {c["workload"] for c in summary["checks"]} == {"ok"}
    starts = json.loads((out / "manifest.json").read_text())["engines"]["starts"]
    [hung] = [s["pid"] for s in starts if s["side"] == "candidate"
              and "broken" in s["workloads"]]
    assert not Path(f"/proc/{hung}").exists(), "the hung engine's process outlived the run"
    report = (out / "report.html").read_text()
    for text in (report, stdout):
        _assert_hint(text, "the watchdog killed its process after 15 s", "raise --timeout")
    assert "Traceback" not in stderr


# ---- 2. a KV cache larger than the memory free at start -----------------------------------

@pytest.mark.slow
def test_a_kv_cache_larger_than_free_memory_is_one_line_and_no_engine_runs(tmp_path, capsys):
    """Each layer's KV tensor alone four times the machine's memory: refused by the engine
    before anything is allocated. Sized so that an engine which lost that check would be
    refused each tensor by the kernel at once (an overcommit that large is never granted),
    not fill the machine's memory."""
    cfg = load_config(DEFAULT_MODEL_DIR)
    per_layer = kv_cache_bytes(cfg, 1, 32, torch.float32) // cfg.num_hidden_layers
    blocks = 4 * os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // per_layer
    suite = ("name: memory\nworkloads:\n  - {id: big-kv, workload: preemption, params: "
             f"{{limit: 2, max_tokens: 24, profile_limit: 1, block_size: 32, "
             f"num_kv_blocks: {blocks}}}}}\n")
    code, stdout, stderr, out = _run(tmp_path, capsys, suite, "--candidate", "v1",
                                     "--baseline", "v1")
    summary = _summary(out)
    assert code == 3 and summary["verdict"] == "error", stderr
    assert {f["side"] for f in summary["failures"]} == {"candidate", "baseline"}
    asked = re.compile(rf"KV cache of {blocks} blocks x 32 tokens needs [\d.]+ GiB but "
                       r"[\d.]+ GiB of cpu memory is available: lower num_kv_blocks$")
    for f in summary["failures"]:
        assert asked.search(f["error"]) and "\n" not in f["error"], f["error"]
        assert "traceback" not in f                  # refused, not crashed
    assert not summary["checks"]
    _assert_hint((out / "report.html").read_text(), "more than the", "lower the workload")
    assert "Traceback" not in stderr


# ---- 3. the disk of --out fills up while the results are committed -----------------------

def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_full_disk_at_the_commit_leaves_the_earlier_results_and_no_half_run(
        tmp_path, capsys, monkeypatch):
    results = tmp_path / "results"
    earlier = write_run(results, 1, name="earlier")        # a run written there before
    before = _digest(earlier)
    write_text = Path.write_text

    def full_disk(self: Path, *args, **kwargs):
        """The last file into the run's hidden directory meets a full disk."""
        if self.name == "summary.json" and self.parent.name.startswith(".run."):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return write_text(self, *args, **kwargs)
    monkeypatch.setattr(Path, "write_text", full_disk)
    code, stdout, stderr, out = _run(tmp_path, capsys, suite("ok"), "--candidate", "v1",
                                     "--baseline", "v1", "--in-process")
    assert code == 3, stderr
    [line] = [ln for ln in stderr.splitlines() if ln.startswith("mrbench: error: ")]
    assert f"could not be written to {out}: No space left on device [ENOSPC] writing " \
           "summary.json on the filesystem mounted at " in line, line
    assert "nothing was written there" in line and "--out" in line
    assert "Traceback" not in stderr
    assert sorted(p.name for p in results.iterdir()) == ["earlier"]   # no run, no temp
    assert _digest(earlier) == before


@pytest.mark.slow
def test_a_full_disk_at_the_report_leaves_the_committed_run_and_says_so_in_one_line(
        tmp_path, capsys, monkeypatch):
    """The run is committed, then its report.html meets a full disk: one line that names the
    report and the OS's error, exit 3, the run as committed (no half report), and the
    report renders once there is room."""
    fsync = os.fsync

    def full_disk(fd: int) -> None:
        """The report's temporary file (harness.show.html.write_atomic) meets a full disk."""
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith(".report.html."):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return fsync(fd)
    monkeypatch.setattr(os, "fsync", full_disk)
    code, stdout, stderr, out = _run(tmp_path, capsys, suite("ok"), "--candidate", "v1",
                                     "--baseline", "v1", "--in-process")
    assert code == 3, stderr
    assert stderr.count("mrbench: error: ") == 1 and "Traceback" not in stderr
    [line] = [ln for ln in stderr.splitlines() if ln.startswith("mrbench: error: ")]
    assert f"the report could not be written to {out / 'report.html'}: No space left on " \
           "device [ENOSPC] on the filesystem mounted at " in line, line
    assert f"the results in {out} are complete" in line and f"mrbench report {out}" in line
    assert "verdict: pass" in stdout and "report: " not in stdout   # the verdict still said
    committed = _digest(out)
    assert {"summary.json", "manifest.json", "requests.csv"} <= set(committed)
    assert not [n for n in committed if "report.html" in n]    # no report, no temporary file
    assert _summary(out)["verdict"] == "pass"
    assert sorted(p.name for p in out.parent.iterdir()) == ["run"]
    monkeypatch.undo()                                          # room again: it renders
    assert main(["report", str(out)]) == 0
    assert (out / "report.html").is_file()
    assert {k: v for k, v in _digest(out).items() if k != "report.html"} == committed


# ---- 4. a model directory with a truncated shard, or no config.json ----------------------

def _sharded_model(folder: Path) -> Path:
    """The bundled model in two safetensors shards with their index."""
    shutil.copytree(DEFAULT_MODEL_DIR, folder)
    weights = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    names = sorted(weights)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for file, part in shards.items():
        save_file({n: weights[n] for n in part}, folder / file)
    (folder / "model.safetensors.index.json").write_text(json.dumps(dict(
        weight_map={n: file for file, part in shards.items() for n in part})))
    return folder


@pytest.mark.parametrize("broken, words", [
    ("truncated shard", "model-00002-of-00002.safetensors is not a readable safetensors file"),
    ("no config.json", "config.json not found"),
])
def test_a_broken_model_directory_is_refused_before_any_engine_starts(
        tmp_path, capsys, monkeypatch, broken, words):
    model = _sharded_model(tmp_path / "model")
    if broken == "truncated shard":
        shard = model / "model-00002-of-00002.safetensors"
        os.truncate(shard, shard.stat().st_size // 2)      # a copy cut off half way
    else:
        (model / "config.json").unlink()
    started = []

    def no_engine(self, *args, **kwargs):
        started.append(self)
        raise AssertionError("an engine process was started")
    monkeypatch.setattr(worker.EngineHost, "__init__", no_engine)
    code, _, stderr, out = _run(tmp_path, capsys, suite("ok"), "--model", str(model))
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1, stderr
    assert lines[0].startswith(f"mrbench: error: --model {model}: ") and words in lines[0], \
        lines[0]
    assert not started and not out.exists() and not out.parent.exists()


# ---- 6. `mrbench history add` killed inside its transaction -------------------------------

def _rows(db: Path) -> tuple[int, int]:
    """(runs, metric rows) the history holds, read as any reader does (history.runs)."""
    n = len(history.runs(db))
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        return n, con.execute("SELECT count(*) FROM metrics").fetchone()[0]


@pytest.mark.slow
@pytest.mark.parametrize("db_before", ["one run", "none"])
def test_a_history_add_killed_mid_transaction_leaves_the_history_as_it_was(
        tmp_path, capsys, killed_run, db_before):
    first, second = (shutil.copytree(killed_run[3], tmp_path / n) for n in ("r1", "r2"))
    db, marker = tmp_path / "history.sqlite", tmp_path / "paused"
    if db_before == "one run":
        assert history.add(db, [first]) == 1
        rows = _rows(db)
    image = db.read_bytes() if db.exists() else b""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "tests"),
                                                       os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "support.history_writer", str(marker),
                             "--db", str(db), str(second)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pid = _wait_for_pid(marker, lambda: proc.poll() is not None)
        assert pid == proc.pid, proc.communicate(timeout=60)
        # at the pause the transaction's pages are in the file and its journal beside it
        assert Path(f"{db}-journal").exists() and db.read_bytes() != image
        os.kill(pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    if db_before == "one run":
        assert _rows(db) == rows                          # the run before, no part of r2
        assert [r["run_dir"] for r in history.runs(db)] == [str(first.resolve())]
    else:                                                 # no history yet: none, in a line
        assert main(["history", "list", "--db", str(db)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is empty (its first `history add` was cut off" in err
    assert main(["history", "add", "--db", str(db), str(second)]) == 0
    assert "added 1 of 1 runs" in capsys.readouterr().out
    assert [r["run_dir"] for r in history.runs(db)][-1] == str(second.resolve())
    assert not Path(f"{db}-journal").exists()
