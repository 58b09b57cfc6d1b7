"""scripts/gpu/carry.sh, run in a throwaway checkout with a stand-in kit and data: the folders
a GPU study copies beside the tree are made, ignored by git, and never half-made; input that
is missing is one line and exit 2. A mistake here shows only on the GPU machine, where the
kit then fails to unpack or a suite stops for want of its data."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts" / "gpu").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "gpu" / "carry.sh", repo / "scripts" / "gpu")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    kit = tmp_path / "vllm-gpu"                    # the shared kit folder's three scripts
    kit.mkdir()
    for f in ("build-kit.sh", "install-kit.sh", "env.sh"):
        (kit / f).write_text(f"# {f}\n")
    parts = tmp_path / "parts"                     # a kit already built: no download here
    parts.mkdir()
    for p in ("part_00", "part_01"):
        (parts / p).write_bytes(p.encode())
    (parts / "SHA256SUMS").write_text("x  part_00\nx  part_01\n")
    data = tmp_path / "data"
    (data / "gsm8k").mkdir(parents=True)
    (data / "traces").mkdir()
    for f in ("gsm8k/test.jsonl", "gsm8k/train.jsonl", "gsm8k/LICENSE-MIT",
              "traces/mooncake_conversation_trace.jsonl"):
        (data / f).write_text("{}\n")
    return repo


def _carry(tmp_path: Path, repo: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "VLLM_GPU_KIT": str(tmp_path / "vllm-gpu"),
            "MRBENCH_DATA_DIR": str(tmp_path / "data"), "NIXL": "0", **env}
    return subprocess.run(["bash", str(repo / "scripts" / "gpu" / "carry.sh"),
                           str(tmp_path / "parts")], capture_output=True, text=True,
                          env=full, timeout=60)


def test_the_folders_are_made_and_ignored(tmp_path):
    repo = _checkout(tmp_path)
    r = _carry(tmp_path, repo)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(os.listdir(repo / ".kit0")) == ["SHA256SUMS", "env.sh", "install-kit.sh",
                                                  "part_00"]
    assert sorted(os.listdir(repo / ".kit1")) == ["SHA256SUMS", "env.sh", "install-kit.sh",
                                                  "part_01"]
    assert sorted(os.listdir(repo / ".gpudata" / "gsm8k")) == ["LICENSE-MIT", "test.jsonl"]
    assert (repo / ".gpudata" / "traces" / "mooncake_conversation_trace.jsonl").is_file()
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"],
                            capture_output=True, text=True).stdout
    assert ".kit" not in status and ".gpudata" not in status   # all four ignored
    assert "MiB of the 64" in r.stdout
    again = _carry(tmp_path, repo)                             # made folders are kept
    assert again.returncode == 0
    excludes = (repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert excludes.count(".kit1/") == 1


def test_missing_data_is_one_line_and_exit_2_with_nothing_made(tmp_path):
    repo = _checkout(tmp_path)
    r = _carry(tmp_path, repo, MRBENCH_DATA_DIR=str(tmp_path / "nowhere"))
    assert r.returncode == 2
    assert r.stdout.strip().count("\n") == 0 and "gsm8k/test.jsonl is missing" in r.stdout
    assert not any((repo / d).exists() for d in (".kit0", ".kit1", ".gpudata"))
