"""Engines are reused across workloads of one engine shape, and a run says what it is doing
on stderr, line by line, when stderr is a file (nightly logs)."""
import json

import pytest
from support.side_by_side import run_variants
from support.suites import three_gsm8k

pytestmark = pytest.mark.slow       # harness runs with engines: CI runs them

SUITE = three_gsm8k()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The three-workload run and the one-workload runs in each build order, side by side
    (support.side_by_side: they judge engines, order and records, never time)."""
    root = tmp_path_factory.mktemp("reuse")
    (root / "reuse.yaml").write_text(SUITE)
    (root / "one.yaml").write_text(SUITE.split("  - id: b")[0])
    return run_variants(root, None, {
        "run": [root / "reuse.yaml"],
        "run-baseline": [root / "one.yaml", "--build-first", "baseline"],
        "run-None": [root / "one.yaml"]})


def test_workloads_of_one_engine_shape_share_the_engines_and_progress_is_printed(runs):
    code, err, out = runs["run"].code, runs["run"].err, runs["run"].path
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0 and summary["verdict"] == "pass", summary["failures"]
    lines = [ln for ln in err.splitlines() if ln.startswith("[mrbench +")]
    # a and c share a shape (limit and problem seed are not part of it): a, c, then b
    starts = [ln for ln in lines if "starting engine" in ln]
    reused = [ln for ln in lines if "engine reused" in ln]
    assert len(starts) == 4 and len(reused) == 2
    assert all(" c / " in ln for ln in reused)
    order = [ln.split("] ")[1].split(" / ")[0] for ln in lines if "done in" in ln]
    assert order == ["a", "a", "c", "c", "b", "b"]
    for side, runner in (("candidate", "v2"), ("baseline", "v1")):
        assert any(f"a / {side} ({runner}): engine ready in" in ln for ln in lines)
    assert lines[-1].endswith("s") and "verdict pass" in lines[-1]
    # the summary keeps the suite's order, and each workload has its own checks and requests
    assert [c["workload"] for c in summary["checks"]][0] == "a"
    assert {c["workload"] for c in summary["checks"]} == {"a", "b", "c"}
    assert summary["checks"].index(next(c for c in summary["checks"] if c["workload"] == "b")) \
        < summary["checks"].index(next(c for c in summary["checks"] if c["workload"] == "c"))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["resolved"]["c"]["candidate"]["startup_s"] == \
        manifest["resolved"]["a"]["candidate"]["startup_s"]          # the same engine
    # each start says where its time went: its new process, and its open call
    starts = manifest["engines"]["starts"]
    assert len(starts) == 4
    for st in starts:
        ph, total = st["phases"], st["start_s"]
        assert ph["open_s"] > 0 and ph["open_s"] <= total, st
        assert ph["process_s"] is None or 0 <= ph["process_s"] <= total - ph["open_s"] + 0.05
    assert any(st["phases"]["process_s"] is not None for st in starts)    # a new process
    assert any("engine ready in" in ln and "(process " in ln for ln in lines)
    html = (out / "report.html").read_text()
    assert 'id="what-ran"' in html and "runner_impl" in html and "<details>" in html


def test_build_first_baseline_builds_the_baseline_engine_first_and_is_recorded(runs):
    """--build-first is the control for a bias that follows build order: the engines are
    built in the order asked for, and the result says which order it was."""
    order = {}
    for first in ("baseline", None):
        run = runs[f"run-{first}"]
        assert run.code == 0, run.err
        starts = [ln.split(" / ")[1].split(" (")[0] for ln in run.err.splitlines()
                  if "starting engine" in ln]
        order[first] = (starts, run.manifest["isolation"]["build_first"])
    assert order["baseline"] == (["baseline", "candidate"], "baseline")
    assert order[None] == (["candidate", "baseline"], "candidate")        # the default
