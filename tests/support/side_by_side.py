"""`mrbench` commands run side by side, each in a process of its own, for a fixture whose runs
are independent and judge nothing by time (tokens, counts, records, engine starts).

Why: a bundled run on the CPU keeps about one core busy (its sides take turns, wave by wave,
and the harness waits on them), so on CI's two cores two such runs take about the time of
one. Each gets OMP_NUM_THREADS=1, which its engine processes inherit: engines that each
spread their ops over both cores slow each other down several-fold when two runs share the
machine (on two cores, tests/e2e/test_engine_starts.py's suite: 17.6 s alone, 60.5 s for two
at once with the default threads, 19.3 s for two at once with one thread each; a run of it
alone is as fast on one thread as on two).

Never for a run whose latency checks must judge: the other run's load is noise there, and
the canary leaves disturbed waves out (latency "not measured"). Nor for the vllm target:
vLLM's CPU backend binds its threads to every core.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JOBS = 2                    # CI's cores; more at once only adds memory (a run's engines)
TIMEOUT_S = 900             # a safety net, as pytest's own timeout, never a measurement


@dataclass(frozen=True)
class Done:
    code: int
    out: str
    err: str


def env_for(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment, one OpenMP thread a process, and tests/ importable in the
    harness and its engines (the stand-in targets of MRBENCH_TARGET_MODULES live there)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", **(extra or {}))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "tests"),
                                                    os.environ.get("PYTHONPATH", "")) if p)
    return env


def mrbench(args: list[str], env: dict[str, str] | None = None) -> Done:
    """`mrbench ARGS` in a new process (as CI's nightly runs it): exit code, stdout, stderr."""
    r = subprocess.run([sys.executable, "-m", "mrbench", *map(str, args)], cwd=ROOT,
                       env=env_for(env), capture_output=True, text=True, timeout=TIMEOUT_S)
    return Done(r.returncode, r.stdout, r.stderr)


def side_by_side(commands: dict[str, list], env: dict[str, str] | None = None,
                 jobs: int = JOBS, own_env: dict[str, dict[str, str]] | None = None
                 ) -> dict[str, Done]:
    """Each named command's Done, `jobs` of them running at once, in the order given (put
    the longest first); `env` is added to every command's environment, `own_env[name]` to
    that command's alone."""
    with ThreadPoolExecutor(jobs) as pool:
        futures = {name: pool.submit(mrbench, args, {**(env or {}),
                                                     **(own_env or {}).get(name, {})})
                   for name, args in commands.items()}
        return {name: f.result() for name, f in futures.items()}


@dataclass(frozen=True)
class Run:
    """One `mrbench run` made by run_variants: its exit code, stdout, stderr, results."""
    code: int
    out: str
    err: str
    path: Path

    @property
    def summary(self) -> dict:
        return json.loads((self.path / "summary.json").read_text())

    @property
    def manifest(self) -> dict:
        return json.loads((self.path / "manifest.json").read_text())


def run_variants(root: Path, suite: str | Path | None, variants: dict[str, list],
                 own_env: dict[str, dict[str, str]] | None = None,
                 env: dict[str, str] | None = None, in_process: bool = False
                 ) -> dict[str, Run]:
    """`mrbench run SUITE ARGS... --out ROOT/NAME` for each named variant, side by side (the
    first given starts first; suite None: each variant's ARGS name their own); each must have
    written its results (else its stderr's tail is the failure). `in_process`: each run's
    engines in its own process (--in-process), for a test of what the checks judge rather
    than of engine processes: a run then imports torch once, not once a side, which is most
    of a small run's CPU time (the engine processes themselves are tested in
    test_engine_isolation, test_engine_reuse, test_engine_starts, test_interrupt and
    test_machine_faults, and every nightly run spawns them)."""
    head = [] if suite is None else [suite]
    tail = ["--in-process"] if in_process else []
    done = side_by_side({name: ["run", *head, *args, *tail, "--out", root / name]
                         for name, args in variants.items()}, env=env, own_env=own_env)
    runs = {name: Run(d.code, d.out, d.err, root / name) for name, d in done.items()}
    for name, r in runs.items():
        assert (r.path / "summary.json").is_file(), f"{name}: exit {r.code}\n{r.err[-3000:]}"
    return runs
