"""Engines planned up front and started together (--engine-starts N): the same checks and
verdicts as one start at a time, every start recorded with its overlap, a start that
crashes recorded as a failure of its workloads alone, and a campaign that keeps engines
across runs only while both sides are kept."""
import json

import pytest
from support.side_by_side import side_by_side

pytestmark = pytest.mark.slow       # harness runs with engines: CI runs them

SUITE = """name: starts
thresholds: {latency_metrics: []}
workloads:
  - id: a
    workload: gsm8k
    params: {limit: 4, max_num_seqs: 2, wave_size: 2, profile_limit: 1, max_tokens: 24}
  - id: b
    workload: gsm8k
    params: {limit: 4, max_num_seqs: 3, wave_size: 3, profile_limit: 1, max_tokens: 24}
  - id: s
    workload: sampled
    params: {limit: 2, samples_per_prompt: 2, max_tokens: 16, max_num_seqs: 4, wave_size: 4,
             profile_limit: 1}
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every run of this module, side by side (support.side_by_side: none judges time), the
    longest first: the serial and together runs, the run whose engine dies at its start, and
    the faults and calibrate campaigns. name -> (Done, its --out)."""
    root = tmp_path_factory.mktemp("starts")
    suite = root / "s.yaml"
    suite.write_text(SUITE)
    commands = {
        "faults": ["faults", suite, "--fault", "seq-lens-sync", "--engine-starts", "3"],
        "calibrate": ["calibrate", suite, "-n", "2", "--candidate", "v2", "--baseline", "v2",
                      "--engine-starts", "3"],
        "serial": ["run", suite, "--engine-starts", "1"],
        "together": ["run", suite, "--engine-starts", "3"],
        "dies": ["run", suite, "--target", "faulty", "--candidate", "start-exit",
                 "--baseline", "bundled:v1", "--engine-starts", "4"],
    }
    done = side_by_side({name: [*args, "--out", root / name] for name, args in commands.items()},
                        own_env={"dies": {"MRBENCH_TARGET_MODULES": "support.engine_faults"}})
    return {name: (d, root / name) for name, d in done.items()}


def _run(runs, name):
    d, out = runs[name]
    assert (out / "summary.json").is_file(), d.err[-3000:]
    return (d.code, json.loads((out / "summary.json").read_text()),
            json.loads((out / "manifest.json").read_text()))


def _judged(summary):
    return {(c["workload"], c["metric"]): (c["verdict"], c["candidate"], c["baseline"])
            for c in summary["checks"] if c["metric"] in (
                "token_agreement", "syncs_per_step", "ops_per_step", "allocs_per_step",
                "state_audit_violations", "accuracy_strict", "sampled_token_agreement")}


def test_together_or_one_at_a_time_the_checks_are_the_same(runs):
    code1, serial, m1 = _run(runs, "serial")
    code3, together, m3 = _run(runs, "together")
    assert code1 == code3 == 0, (serial["failures"], together["failures"])
    assert _judged(serial) == _judged(together) and _judged(serial)
    # one at a time: each shape resident alone, as engines were always started
    assert len(m1["engines"]["plan"]["groups"]) == 3
    assert all(s["overlapped"] == 0 for s in m1["engines"]["starts"])
    # together: one group of the three shapes on both sides, started 3 at a time
    [group] = m3["engines"]["plan"]["groups"]
    assert sorted((e["side"], e["workloads"][0]) for e in group) == sorted(
        (s, w) for s in ("baseline", "candidate") for w in "abs")
    starts = m3["engines"]["starts"]
    assert len(starts) == 6 and max(s["overlapped"] for s in starts) >= 2
    assert all(s["start_s"] > 0 and s["began_s"] >= 0 for s in starts)
    err = runs["together"][0].err
    assert "engine plan: 6 engines in 1 start group, up to 3 starting at once" in err
    assert "start group 1/1 / candidate (v2): starting engine (b)" in err
    # each workload names the start of the engine that served it
    res = m3["resolved"]["b"]["candidate"]["engine_start"]
    assert res["workloads"] == ["b"] and res["side"] == "candidate"


def test_an_engine_that_dies_while_starting_with_others_fails_its_workload_alone(runs):
    code, summary, manifest = _run(runs, "dies")
    assert code == 3 and summary["verdict"] == "error"
    [fail] = summary["failures"]
    assert (fail["workload"], fail["side"]) == ("b", "candidate")
    assert "exit code 9" in fail["error"], fail["error"]
    assert fail.get("engine_log", "").startswith("engine-logs/b.candidate")
    assert {c["workload"] for c in summary["checks"]} == {"a", "s"}
    [dead] = [s for s in manifest["engines"]["starts"] if s["error"]]
    assert dead["workloads"] == ["b"] and "exit code 9" in dead["error"]


def test_a_campaign_keeps_engines_only_while_both_sides_are_kept(runs):
    """`faults` changes the candidate every run, so its fault run starts both sides again
    (an engine kept across runs is never measured against a fresh one); `calibrate` changes
    neither side, so its second run is served by the first run's engines on both sides."""
    done, out = runs["faults"]
    assert done.code == 0, done.err[-3000:]
    clean = json.loads((out / "clean" / "manifest.json").read_text())
    fault = json.loads((out / "seq-lens-sync" / "manifest.json").read_text())
    assert {s["side"] for s in clean["engines"]["starts"]} == {"baseline", "candidate"}
    assert sorted(s["side"] for s in fault["engines"]["starts"]) == sorted(
        s["side"] for s in clean["engines"]["starts"])
    for w in "abs":
        for side in ("baseline", "candidate"):
            assert "reused_from_run" not in fault["resolved"][w][side]["engine_start"]
    assert json.loads((out / "faults.json").read_text())["faults"]["seq-lens-sync"][
        "status"] == "caught"

    done, out = runs["calibrate"]
    assert done.code == 0, done.err[-3000:]
    first, second = (json.loads((out / f"run-0{i}" / "manifest.json").read_text())
                     for i in (0, 1))
    assert {s["side"] for s in first["engines"]["starts"]} == {"baseline", "candidate"}
    assert second["engines"]["starts"] == []
    for w in "abs":
        for side in ("baseline", "candidate"):
            assert second["resolved"][w][side]["engine_start"]["reused_from_run"] == 0
