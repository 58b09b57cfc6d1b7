"""Chunked-prefill coverage end to end on the bundled runners (CPU): quick's `gsm8k-chunked`
entry with `--fault chunk-slot-mapping` (the class of vLLM PR 36580) is a token-agreement
regression, and the same prompts at a budget that never splits them in three pass token
agreement but are "not measured" by chunked_prefill_coverage. The clean side of the story
(V2 vs V1 agree, middle chunks on both) is asserted on the clean quick run in
test_harness_quick.py, which CI computes anyway."""
import json

import pytest
import yaml

from mrbench.harness.cli import main
from mrbench.harness.measure.prefill_chunks import MIDDLE, PROMPTS_3PLUS
from mrbench.harness.record.suite import load_suite

pytestmark = pytest.mark.slow


def suite_yaml() -> str:
    """quick's chunked entry on 4 prompts, unprofiled, and the same at a 2048-token budget."""
    entry = next(w for w in load_suite("quick").workloads if w.id == "gsm8k-chunked")
    params = dict(entry.params, limit=4, wave_size=4, profile_limit=0)
    wl = [dict(id="chunked", workload="gsm8k", params=params, thresholds=entry.thresholds),
          dict(id="unchunked", workload="gsm8k", thresholds=entry.thresholds,
               params=dict(params, max_num_batched_tokens=2048))]
    return yaml.safe_dump(dict(name="chunked", workloads=wl))


def by_metric(summary, wid):
    return {c["metric"]: c for c in summary["checks"] if c["workload"] == wid}


def test_a_middle_chunk_fault_is_a_token_regression_where_middle_chunks_ran(tmp_path):
    (tmp_path / "s.yaml").write_text(suite_yaml())
    out = tmp_path / "fault"
    code = main(["run", str(tmp_path / "s.yaml"), "--fault", "chunk-slot-mapping",
                 "--out", str(out), "--in-process"])
    summary = json.loads((out / "summary.json").read_text())
    assert code == 1 and summary["verdict"] == "regression" and not summary["failures"]
    chunked, unchunked = by_metric(summary, "chunked"), by_metric(summary, "unchunked")

    assert chunked["token_agreement"]["verdict"] == "regression"
    assert chunked["token_agreement"]["candidate"] < 1
    cov = chunked["chunked_prefill_coverage"]
    assert cov["verdict"] == "pass" and cov["baseline"] == cov["candidate"] == 4
    for side in ("baseline", "candidate"):
        m = summary["metrics"]["chunked"][side]
        assert m[PROMPTS_3PLUS] == 4 and m[MIDDLE] >= 4 * 2, (side, m)   # >= 5 chunks each

    # the same prompts in one chunk each: the fault has nothing to break, and coverage
    # says it was not measured rather than passing
    assert unchunked["token_agreement"]["verdict"] == "pass"
    cov = unchunked["chunked_prefill_coverage"]
    assert cov["verdict"] == "info" and cov["note"].startswith("not measured: ")
    assert summary["metrics"]["unchunked"]["candidate"][MIDDLE] == 0
    assert {(c["workload"], c["metric"]) for c in summary["checks"]
            if c["verdict"] == "regression"} == {("chunked", "token_agreement")}
