"""A suite entry's `engine_pairs`: a real run on the bundled model whose timed waves are cut
over two pairs of engines, each pair in new processes. What the gate pools must be what
ran: every row carries its pair, each pair ran its own engine processes, and the latency
check judged over the pairs (harness.run.execute.drive_interleaved, checks/latency.py)."""
import csv
import json

import pytest

from mrbench.harness.cli import main

pytestmark = pytest.mark.slow

SUITE = """name: two-pairs
description: 12 ABBA waves of 1 GSM8K problem over two engine pairs
thresholds: {median_rel: 0.20, latency_rel: 1.0, pair_sd_rel: 0.02}
workloads:
  - id: gsm8k
    workload: gsm8k
    params: {mode: colocated, limit: 12, max_num_seqs: 1, wave_size: 1, profile_limit: 1,
             max_tokens: 8}
    engine_pairs: 2
"""


def test_waves_run_on_two_engine_pairs_and_are_pooled(tmp_path):
    suite = tmp_path / "pairs.yaml"
    suite.write_text(SUITE)
    run = tmp_path / "run"
    code = main(["run", str(suite), "--baseline", "v2", "--candidate", "v2",
                 "--out", str(run)])
    assert code in (0, 1)            # a busy machine may make latency "not measured"
    with open(run / "steps.csv") as f:
        rows = list(csv.DictReader(f))
    pair_of = {(r["side"], int(r["wave"])): int(r["engine_pair"]) for r in rows}
    assert {w for (s, w), k in pair_of.items() if k == 0} == set(range(6))
    assert {w for (s, w), k in pair_of.items() if k == 1} == set(range(6, 12))
    starts = json.loads((run / "manifest.json").read_text())["engines"]["starts"]
    pids = {s: [x["pid"] for x in starts if x["side"] == s] for s in ("baseline", "candidate")}
    assert all(len(set(p)) == 2 for p in pids.values()), pids   # a new process a pair
    checks = {c["metric"]: c for c in json.loads((run / "summary.json").read_text())["checks"]
              if c["workload"] == "gsm8k"}
    med = checks["median_step_ms"]
    assert "random-effects mean over 2 unit(s)" in med["method"]
    assert len(med["pairs"]) == 2 and "engine pairs" in med["note"]
    assert checks["token_agreement"]["verdict"] == "pass"     # greedy: the pairs agree
