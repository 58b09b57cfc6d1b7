"""The acceptance-length gate end to end: a tiny spec-decode suite (n-gram k = 2, batch 4,
8 requests in 2 ABBA waves) on the bundled model, CPU, about 20 s a run. Clean V2 against
V1 passes and was measured (drafts on both sides); V2 with `strict-acceptance`, which
rejects drafts a correct sampler accepts but keeps every token, is an acceptance
regression while token agreement still passes."""

import pytest
from support.side_by_side import run_variants

pytestmark = pytest.mark.slow       # harness runs with engines: CI runs them

SUITE = """name: acceptance
thresholds: {latency_metrics: []}      # acceptance only: no latency gate on a shared CPU
workloads:
  - id: spec
    workload: spec-decode
    params: {ks: [2], proposers: [ngram], batch_sizes: [4], limit: 8, max_tokens: 64,
             wave_size: 4, profile_limit: 0}
"""
WL = "spec.k2-ngram-b4"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The clean run and the strict-acceptance run, side by side (support.side_by_side: the
    suite gates no latency): name -> (exit code, summary, this entry's checks by metric)."""
    root = tmp_path_factory.mktemp("acceptance")
    (root / "acceptance.yaml").write_text(SUITE)
    runs = run_variants(root, root / "acceptance.yaml",
                        {"clean": [], "fault": ["--fault", "strict-acceptance"]},
                        in_process=True)
    return {name: (r.code, r.summary,
                   {c["metric"]: c for c in r.summary["checks"] if c["workload"] == WL})
            for name, r in runs.items()}


def test_clean_v2_passes_the_acceptance_gate(runs):
    code, summary, checks = runs["clean"]
    assert code == 0 and summary["verdict"] == "pass", summary["failures"]
    al = checks["mean_acceptance_length"]
    assert al["verdict"] == "pass" and al["p_value"] == 1.0, al          # judged, not info
    assert al["baseline"] == al["candidate"] > 1.2 and al["delta"] == 0.0
    assert "over 8 paired requests" in al["method"]
    m = summary["metrics"][WL]
    assert m["candidate"]["spec_decode_num_drafts"] > 0
    assert m["baseline"]["spec_decode_num_drafts"] > 0


def test_strict_acceptance_is_an_acceptance_regression_with_the_same_tokens(runs):
    code, summary, checks = runs["fault"]
    assert code == 1 and summary["verdict"] == "regression", summary["failures"]
    assert summary["candidate_faults"] == ["strict-acceptance"]
    al = checks["mean_acceptance_length"]
    assert al["verdict"] == "regression", al
    assert al["p_value"] < 0.05 and al["delta"] < -0.05 and al["candidate"] < al["baseline"]
    assert checks["token_agreement"]["verdict"] == "pass"
    assert checks["token_agreement"]["candidate"] == 1.0
    assert [c["metric"] for c in summary["checks"] if c["verdict"] == "regression"] == [
        "mean_acceptance_length"]
