"""The sampling fields reach vLLM's SamplingParams with vLLM's meaning: on greedy rows (whose
argmax a logit bias and penalties move, in vLLM as in the bundled runner), vLLM's V1 (CPU)
gives the bundled V1's tokens on the same weights, token for token, with a logit bias and
with the bias and repetition, frequency and presence penalties together; and the penalties
change the tokens (the bundled model is so sure of GSM8K that only a banned space makes it
unsure enough for them to), so that parity is not the bias-only one again."""
import json

import pytest
from test_vllm_target import needs_vllm

from mrbench.harness.cli import main

ENTRY = """  - id: {id}
    workload: sampled
    params: {{limit: 8, samples_per_prompt: 2, temperature: 0.0, logit_bias: {{3: -100.0}},
             {extra}max_tokens: 16, max_num_seqs: 8, wave_size: 8, profile_limit: 0}}
    thresholds: {{latency_metrics: []}}
"""
SUITE = "name: vllm-processed-greedy\nworkloads:\n" + ENTRY.format(id="bias", extra="") + \
    ENTRY.format(id="penalties", extra="repetition_penalty: 1.5, frequency_penalty: 1.0, "
                                       "presence_penalty: 1.0,\n             ")


@pytest.mark.weekly
@needs_vllm
def test_logit_bias_and_penalties_match_vllm_on_greedy_rows(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "run"
    code = main(["run", str(suite), "--target", "vllm", "--candidate", "v1",
                 "--baseline", "bundled:v1", "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0, summary["failures"]
    parity = {c["workload"]: c for c in summary["checks"] if c["metric"] == "cross_engine_parity"}
    for entry in ("bias", "penalties"):
        assert parity[entry]["candidate"] == 1.0, parity[entry]
    tokens: dict[tuple[str, str], list] = {}
    for line in (out / "tokens.jsonl").read_text().splitlines():
        r = json.loads(line)
        tokens.setdefault((r["workload"], r["side"]), []).append(tuple(r["token_ids"]))
    assert all(3 not in t for toks in tokens.values() for t in toks)     # the bias bans ' '
    for side in ("baseline", "candidate"):
        assert tokens[("bias", side)] != tokens[("penalties", side)], side
