"""Synthetic run directories for history tests: a manifest and a summary as a run writes
them, with the figures a trend is made of and the candidate's vLLM build."""
from __future__ import annotations

import json
from pathlib import Path


def commit(i: int) -> str:
    """Night i's vLLM commit: 40 hex digits that start with the night's number."""
    return f"{i:04d}" + "abcdef0123456789abcdef0123456789abcd"


def write_run(root: Path, day: int, ops: float = 100.0, ratio: float | None = None,
              target: str = "vllm", version: str = "0.26.1", name: str | None = None,
              baseline: str = "v1", candidate: str = "v2") -> Path:
    """A run directory of night `day` (2026-11-DD): ops per step as its count check, and
    with `ratio` a judged P99 E2E of candidate/baseline = ratio. On the vllm target both
    sides report vLLM `version` and commit(day); on the bundled one, no vLLM."""
    d = root / (name or f"run-{day:02d}")
    d.mkdir(parents=True)
    vllm = target == "vllm"

    def side(_: str) -> dict:
        return dict(target=target, model="m", device="cuda",
                    **(dict(vllm_version=version, vllm_commit=commit(day)) if vllm else {}))

    (d / "manifest.json").write_text(json.dumps(dict(
        results_format=1, created=f"2026-11-{day:02d}T03:17:00", git_sha=f"{day:02d}" + "f" * 38,
        resolved=dict(w=dict(baseline=side("baseline"), candidate=side("candidate"))))))
    checks = [dict(workload="w", metric="ops_per_step", baseline=100.0, candidate=ops,
                   verdict="pass")]
    metrics: dict = {}
    if ratio is not None:
        checks.append(dict(workload="w", metric="p99_e2el_ms", baseline=100.0,
                           candidate=100 * ratio, delta=ratio - 1, verdict="pass"))
        metrics = dict(w=dict(baseline=dict(p99_e2el_ms=100.0),
                              candidate=dict(p99_e2el_ms=100 * ratio)))
    (d / "summary.json").write_text(json.dumps(dict(
        verdict="pass", suite="nightly", target=target, baseline=baseline,
        candidate=candidate, candidate_faults=[], metrics=metrics, checks=checks)))
    return d


def write_comparison_run(root: Path, name: str, checks: list[dict], day: int,
                         verdict: str = "pass", faults: tuple[str, ...] = (),
                         candidate: str = "v2") -> Path:
    """A vLLM V2-against-V1 run of suite `s` on CUDA with these checks (workload `g` or
    `w`), as the history gate's tests compare runs."""
    d = root / name
    d.mkdir()
    wls = {c["workload"] for c in checks}
    (d / "manifest.json").write_text(json.dumps(dict(
        results_format=2, created=f"2026-11-{day:02d}T00:00:00",
        resolved={w: dict(candidate=dict(model="m", device="cuda")) for w in wls})))
    (d / "summary.json").write_text(json.dumps(dict(
        verdict=verdict, suite="s", target="vllm", baseline="v1", candidate=candidate,
        candidate_faults=list(faults), metrics={}, checks=checks)))
    return d
