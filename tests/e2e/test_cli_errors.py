"""Bad input: one error line naming the problem, exit 2, no traceback, nothing written."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mrbench.harness.cli import main

ROOT = Path(__file__).resolve().parents[2]


def run_cli(args, capsys):
    code = main(args)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def assert_bad_input(code, err, *needles):
    assert code == 2, err
    lines = [x for x in err.strip().splitlines() if x]
    assert len(lines) == 1, err
    assert lines[0].startswith("mrbench: error: ")
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture
def out(tmp_path):
    return tmp_path / "results" / "run"


def test_unknown_suite_or_workload(capsys, out):
    code, _, err = run_cli(["run", "no-such-suite", "--out", str(out)], capsys)
    assert_bad_input(code, err, "no-such-suite", "quick")
    assert not out.exists()


def test_unknown_fault(capsys, out):
    code, _, err = run_cli(["run", "smoke", "--fault", "typo-fault", "--out", str(out)], capsys)
    assert_bad_input(code, err, "typo-fault", "stale-slot-state")
    assert not out.exists()


def test_unknown_runner_and_target(capsys, out):
    code, _, err = run_cli(["run", "smoke", "--candidate", "v3", "--out", str(out)], capsys)
    assert_bad_input(code, err, "v3")
    code, _, err = run_cli(["run", "smoke", "--target", "nope", "--out", str(out)], capsys)
    assert_bad_input(code, err, "nope")
    assert not out.exists()


def test_unknown_engine_start_method(capsys, out, monkeypatch):
    monkeypatch.setenv("MRBENCH_ENGINE_START", "forkserver")
    code, _, err = run_cli(["run", "smoke", "--out", str(out)], capsys)
    assert_bad_input(code, err, "MRBENCH_ENGINE_START", "forkserver", "auto, preload or spawn")
    assert not out.exists()


def test_bad_flags(capsys, out):
    code, _, err = run_cli(["run", "smoke", "--limit", "zero"], capsys)
    assert_bad_input(code, err, "--limit")
    code, _, err = run_cli(["run", "smoke", "--limit", "0", "--out", str(out)], capsys)
    assert_bad_input(code, err, "--limit")
    code, _, err = run_cli(["frobnicate"], capsys)
    assert_bad_input(code, err, "frobnicate")


@pytest.mark.parametrize("text, needle", [
    ("name: x\nworkloads: [\n", "malformed YAML"),
    ("- just\n- a list\n", "mapping"),
    ("name: x\nworkloads: []\n", "workloads"),
    ("name: x\nworkload:\n  - {id: a, workload: gsm8k}\n", "workload"),
    ("name: x\nworkloads:\n  - {id: a, workload: nope}\n", "nope"),
    ("name: x\nworkloads:\n  - {id: a, workload: gsm8k, params: {limt: 3}}\n", "limt"),
    ("name: x\nworkloads:\n  - {id: a, workload: gsm8k, params: {mode: sideways}}\n", "mode"),
    ("name: x\nthresholds: {latency_metrics: [p42_foo]}\nworkloads:\n"
     "  - {id: a, workload: gsm8k}\n", "p42_foo"),
    ("name: x\nworkloads:\n  - {id: a, workload: gsm8k}\n  - {id: a, workload: gsm8k}\n",
     "duplicate"),
])
def test_malformed_suite(tmp_path, capsys, out, text, needle):
    suite = tmp_path / "suite.yaml"
    suite.write_text(text)
    code, _, err = run_cli(["run", str(suite), "--out", str(out)], capsys)
    assert_bad_input(code, err, str(suite), needle)
    assert not out.exists()


def test_missing_dataset(tmp_path, capsys, out):
    code, _, err = run_cli(["run", "smoke", "--dataset", str(tmp_path / "gone.jsonl"),
                            "--out", str(out)], capsys)
    assert_bad_input(code, err, "gone.jsonl", "does not exist")
    assert not out.exists()


@pytest.mark.parametrize("bad_line, needle", [
    ("{not json", "not JSON"),
    ('{"question": "q only"}', "'answer'"),
    ('["a", "list"]', "'question'"),
])
def test_dataset_with_a_bad_line(tmp_path, capsys, out, bad_line, needle):
    ds = tmp_path / "gsm8k.jsonl"
    good = '{"question": "Ann has 2 cats. How many?", "answer": "2\\n#### 2"}'
    ds.write_text("\n".join([good, good, bad_line, good]) + "\n")
    code, _, err = run_cli(["run", "smoke", "--dataset", str(ds), "--out", str(out)], capsys)
    assert_bad_input(code, err, f"{ds}:3", needle)
    assert not out.exists()


def test_training_seed_is_refused(capsys, out):
    code, _, err = run_cli(["run", "gsm8k", "--seed", "5", "--out", str(out)], capsys)
    assert_bad_input(code, err, "seed 5", "training seed")


def test_bad_model_path(tmp_path, capsys, out):
    code, _, err = run_cli(["run", "smoke", "--model", str(tmp_path), "--out", str(out)], capsys)
    assert_bad_input(code, err, str(tmp_path))
    assert not out.exists()


def test_unwritable_out(capsys):
    """/proc refuses new directories even to root."""
    code, _, err = run_cli(["run", "smoke", "--out", "/proc/mrbench-test/run"], capsys)
    assert_bad_input(code, err, "not writable")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_out_permissions(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        code, _, err = run_cli(["run", "smoke", "--out", str(locked / "run")], capsys)
        assert_bad_input(code, err, "not writable")
        assert not (locked / "run").exists()
    finally:
        locked.chmod(0o700)


def test_out_that_is_a_file_or_a_full_directory(tmp_path, capsys):
    f = tmp_path / "a-file"
    f.write_text("x")
    code, _, err = run_cli(["run", "smoke", "--out", str(f / "run")], capsys)
    assert_bad_input(code, err, "not writable")
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("x")
    code, _, err = run_cli(["run", "smoke", "--out", str(full)], capsys)
    assert_bad_input(code, err, "already exists")
    assert [p.name for p in full.iterdir()] == ["keep.txt"]


def test_compare_and_report_need_results_dirs(tmp_path, capsys):
    code, _, err = run_cli(["report", str(tmp_path / "nothing")], capsys)
    assert_bad_input(code, err, "not a results directory")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.json").write_text("{")
    (bad / "summary.json").write_text("{}")
    code, _, err = run_cli(["compare", str(bad), str(bad)], capsys)
    assert_bad_input(code, err, "corrupt JSON")


def test_entry_point_prints_one_line(tmp_path):
    """The installed console script, as a user runs it (no traceback on stderr)."""
    r = subprocess.run([sys.executable, "-m", "mrbench.harness.cli", "run", "nope",
                        "--out", str(tmp_path / "o")], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr


def test_list(capsys):
    code, out, _ = run_cli(["list"], capsys)
    assert code == 0
    for name in ("gsm8k", "smoke", "quick", "nightly", "bundled", "stale-slot-state",
                 "seq-lens-sync", "warmup-short-prefill"):
        assert name in out


def test_faults_and_calibrate_bad_input(capsys, out):
    code, _, err = run_cli(["faults", "quick", "--fault", "typo-fault", "--out", str(out)], capsys)
    assert_bad_input(code, err, "typo-fault")
    code, _, err = run_cli(["calibrate", "quick", "-n", "0", "--out", str(out)], capsys)
    assert_bad_input(code, err, "-n")
    code, _, err = run_cli(["calibrate", "smoke", "--max-rate", "2", "--out", str(out)], capsys)
    assert_bad_input(code, err, "--max-rate")
    code, _, err = run_cli(["calibrate", "no-such-suite", "--out", str(out)], capsys)
    assert_bad_input(code, err, "no-such-suite")
    assert not out.exists()


def test_save_reference_refuses_faults(capsys, out):
    code, _, err = run_cli(["run", "smoke", "--fault", "seq-lens-sync", "--save-reference",
                            "--out", str(out)], capsys)
    assert_bad_input(code, err, "--save-reference")
    assert not out.exists()


@pytest.mark.parametrize("text, needle", [
    ("name: s\nworkloads:\n  - {id: a, workload: gsm8k, thresholds: {latency_rel: -1}}\n",
     "latency_rel"),
    ("name: s\nworkloads:\n  - {id: a, workload: spec-decode, params: {ks: []}}\n", "ks"),
    ("name: s\nworkloads:\n  - {id: a, workload: warmup, params: {kk: [1]}}\n", "kk"),
])
def test_bad_workload_thresholds_and_params(tmp_path, capsys, out, text, needle):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    code, _, err = run_cli(["run", str(p), "--out", str(out)], capsys)
    assert_bad_input(code, err, needle)
    assert not out.exists()


def test_trace_options_need_a_trace_workload(capsys, out):
    code, _, err = run_cli(["run", "smoke", "--time-scale", "0.5", "--out", str(out)], capsys)
    assert_bad_input(code, err, "--time-scale", "smoke")
    code, _, err = run_cli(["run", "trace", "--time-scale", "-1", "--out", str(out)], capsys)
    assert_bad_input(code, err, "time_scale")
    assert not out.exists()


@pytest.mark.parametrize("spec, needle", [("four", "CPU numbers"), ("3-1", "bad range"),
                                          ("100000", "not available")])
def test_bad_pin_cpus(capsys, out, spec, needle):
    code, _, err = run_cli(["run", "smoke", "--pin-cpus", spec, "--out", str(out)], capsys)
    assert_bad_input(code, err, "--pin-cpus", needle)
    assert not out.exists()
