"""scripts/gpu/runs_until.sh, the GPU study's loop, run here with a stand-in for Python.

The script runs on a lent GPU, where a mistake costs device time that no later session
gets back: a refused run repeated until the call's budget is spent, or flags that never
reach mrbench. The stand-in records the command line it was given and exits as told, so
these tests check the loop's own logic (what it passes, when it stops, what it says),
not mrbench's.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu" / "runs_until.sh"

FAKE_PYTHON = """#!/usr/bin/env bash
[[ $1 == -c ]] && exit 0                       # the script's `import pydantic` probe
[[ $1 == scripts/gpu/make_build.py ]] && { mkdir -p "$3"; echo "MAKE: $*"; exit 0; }
echo "ARGS: $*"
echo "TRITON_CACHE_DIR: ${TRITON_CACHE_DIR:-unset}"
[[ $* == *--bogus* ]] && { echo "mrbench run: unrecognized arguments: --bogus" >&2; exit 2; }
exit 0
"""


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    full_env = {**os.environ, "PYTHON": str(fake), "RUNS_DIR": str(tmp_path / "runs"), **env}
    return subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), *args],
                          capture_output=True, text=True, env=full_env, timeout=60)


def _argv(tmp_path: Path, name: str) -> str:
    return (tmp_path / "runs" / f"{name}.stdout").read_text()


def test_run_args_reach_mrbench_and_settings_take_turns(tmp_path: Path) -> None:
    res = _run(tmp_path, "t", "0", "clean,7.6", RUN_ARGS="--limit 3072", FIRST="1")
    assert res.returncode == 0, res.stderr
    first = _argv(tmp_path, "t-01-7.6")      # FIRST=1 starts at the second setting
    assert "--fault slow-step:7.6" in first and "--limit 3072" in first
    assert "--pin-cpus 4 --canary-cpu 5" in first
    assert "RUN_ARGS: --limit 3072" in (tmp_path / "out" / "env.txt").read_text()
    log = (tmp_path / "out" / "log.txt").read_text()
    assert "t-01-7.6: exit 0" in log and "next FIRST=" in log


def test_a_refused_run_ends_the_call_once_with_its_reason(tmp_path: Path) -> None:
    res = _run(tmp_path, "u", "600", "clean", RUN_ARGS="--bogus 1")
    assert res.returncode == 2
    log = (tmp_path / "out" / "log.txt").read_text()
    assert log.count("started") == 1          # not one refusal after another until 600 s
    assert "stop: mrbench refused the run: mrbench run: unrecognized arguments" in log
    assert "next FIRST=1" in log


@pytest.mark.parametrize("first,name,flags", [
    ("0", "w-00-clean", ""), ("1", "w-01-clean-bfirst", "--build-first baseline"),
    ("2", "w-02-7.6-bfirst", "--fault slow-step:7.6 --build-first baseline")])
def test_at_baseline_builds_the_baseline_engine_first(tmp_path: Path, first: str, name: str,
                                                      flags: str) -> None:
    res = _run(tmp_path, "w", "0", "clean,clean@baseline,7.6@baseline", FIRST=first)
    assert res.returncode == 0, res.stdout
    argv = _argv(tmp_path, name)
    assert ("--build-first" in argv) == bool(flags) and flags in argv
    assert "slow-step" not in argv or "slow-step:7.6 " in argv    # the @ is not in the PCT


@pytest.mark.parametrize("settings", ["clean,clen", "7.6,-5", "slow", "clean@candidate",
                                      "@baseline"])
def test_a_bad_setting_is_one_line_and_exit_2(tmp_path: Path, settings: str) -> None:
    res = _run(tmp_path, "v", "600", settings)
    assert res.returncode == 2
    assert res.stdout.count("\n") == 1 and "neither 'clean', a slow-step PCT nor build:NAME" in res.stdout
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_cold_settings_give_a_run_an_empty_triton_cache_and_keep_or_rebuild(tmp_path: Path
                                                                            ) -> None:
    """clean@cold-keep measures the engine that compiled, clean@cold lets the harness
    rebuild it: each gets a Triton cache of its own, the others the machine's."""
    res = _run(tmp_path, "c", "0", "clean@cold-keep,clean@cold,clean", FIRST="0")
    assert res.returncode == 0, res.stderr
    keep = _argv(tmp_path, "c-00-clean-coldkeep")
    assert "--cold-engines keep" in keep
    assert f"TRITON_CACHE_DIR: {tmp_path / 'runs' / 'c-00-clean-coldkeep.triton'}" in keep
    assert _run(tmp_path, "c", "0", "clean@cold-keep,clean@cold,clean",
                FIRST="1").returncode == 0
    cold = _argv(tmp_path, "c-01-clean-cold")
    assert "--cold-engines" not in cold and "c-01-clean-cold.triton" in cold
    assert _run(tmp_path, "c", "0", "clean@cold-keep,clean@cold,clean",
                FIRST="2").returncode == 0
    plain = _argv(tmp_path, "c-02-clean")
    assert "--cold-engines" not in plain and "--build-first" not in plain
    assert f"TRITON_CACHE_DIR: {os.environ.get('TRITON_CACHE_DIR', 'unset')}" in plain
    assert _run(tmp_path, "d", "0", "clean@hot").returncode == 2


def test_with_site_each_run_is_two_builds_and_a_fault_build_is_made_once(tmp_path: Path
                                                                         ) -> None:
    """SITE: the baseline is that vLLM site, the candidate a linked copy (b-same) or a copy
    with a fault written back (build:NAME, made by make_build.py once and kept)."""
    env = dict(SITE="/kit/site", BUILDS_DIR=str(tmp_path / "b"))
    for first in ("0", "1", "2"):
        res = _run(tmp_path, "s", "0", "clean,build:seq-lens-sync,5", FIRST=first, **env)
        assert res.returncode == 0, res.stdout
    same, fault = tmp_path / "b" / "b-same", tmp_path / "b" / "b-seq-lens-sync"
    clean = _argv(tmp_path, "s-00-clean")
    assert f"--baseline vllm@/kit/site:v2 --candidate vllm@{same}:v2" in clean
    assert "--target vllm" in clean and "--fault" not in clean
    built = _argv(tmp_path, "s-01-seq-lens-sync")
    assert f"--candidate vllm@{fault}:v2" in built and "--fault" not in built
    ruler = _argv(tmp_path, "s-02-5")
    assert f"--candidate vllm@{same}:v2" in ruler and "--fault slow-step:5" in ruler
    log = (tmp_path / "out" / "log.txt").read_text()
    assert log.count("MAKE:") == 2                   # b-same once, b-seq-lens-sync once
    assert f"MAKE: scripts/gpu/make_build.py /kit/site {fault} --fault seq-lens-sync" in log


def test_a_fault_build_without_site_is_refused(tmp_path: Path) -> None:
    res = _run(tmp_path, "x", "0", "build:seq-lens-sync")
    assert res.returncode == 2 and "needs SITE" in res.stdout
