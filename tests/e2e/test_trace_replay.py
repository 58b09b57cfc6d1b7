"""Open-loop trace replay through PD instances: a short synthetic trace end to end, and the
shipped Mooncake trace's shaping (no engine)."""
import json

import pandas as pd
import pytest

from mrbench.harness.cli import main
from mrbench.workloads import trace_replay, traces

pytestmark = pytest.mark.slow       # harness runs with engines: CI runs them

SUITE = """name: t
workloads:
  - id: synth
    workload: trace-replay
    params: {trace: "synthetic:n=24,rate=40,input=16-200,output=4-24,seed=3,prefix=0.5,block=16",
             limit: 24, wave_size: 6, max_num_seqs: 4, profile_limit: 4}
"""


@pytest.fixture(scope="module")
def replay_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("trace")
    (root / "t.yaml").write_text(SUITE)
    # in-process: this tests the replay, not engine isolation (saves a spawn per side)
    code = main(["run", str(root / "t.yaml"), "--out", str(root / "run"),
                 "--max-input-len", "150", "--time-scale", "0.5", "--in-process"])
    return code, root / "run"


def test_synthetic_pd_replay_reports_serving_metrics(replay_run):
    code, out = replay_run
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0 and summary["verdict"] == "pass", summary["checks"]
    m = summary["metrics"]["synth"]["candidate"]
    for k in ("p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms", "p99_queue_ms",
              "p99_kv_handoff_ms", "slot_reuses"):
        assert m[k] is not None and m[k] >= 0, k
    assert m["slot_reuses"] >= 24 - 4                 # 4 decode slots served 24 requests
    req = pd.read_csv(out / "requests.csv")
    cand = req[req.side == "candidate"]
    assert len(cand) == 24 and sorted(cand.wave.unique()) == [0, 1, 2, 3]
    assert cand.prompt_tokens.max() <= 150 < 200                # --max-input-len applied
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["workloads"]["synth"]["params"]["time_scale"] == 0.5
    assert (cand.output_tokens == [r.output_len for r in trace_replay.WORKLOAD.prepare(
        trace_replay.Params.model_validate(
            {"trace": "synthetic:n=24,rate=40,input=16-200,output=4-24,seed=3,prefix=0.5,"
                      "block=16", "limit": 24}))]).all()   # exactly the trace's lengths
    checks = {c["metric"]: c for c in summary["checks"]}
    assert checks["token_agreement"]["candidate"] == 1.0


def test_mooncake_shaping_keeps_shared_prefixes():
    if not traces.traces_dir().is_dir():
        pytest.skip(f"no trace data at {traces.traces_dir()} (set MRBENCH_DATA_DIR)")
    p = trace_replay.Params(limit=200)
    items = trace_replay.WORKLOAD.prepare(p)
    assert len(items) == 200 and max(r.input_len for r in items) <= p.max_input_len
    assert all(r.input_len + r.output_len <= 512 for r in items)
    toks = [traces.prompt_tokens(r, 128, 16, reserved=trace_replay.RESERVED_IDS)
            for r in items[:20]]
    assert all(t[:16] == toks[0][:16] for t in toks)  # every Mooncake request shares block 0
    assert len({tuple(t) for t in toks}) > 1


def test_a_request_too_long_for_the_model_is_bad_input(tmp_path, capsys):
    (tmp_path / "t.yaml").write_text(SUITE.replace("limit: 24,", "limit: 24, max_input_len: 500, length_scale: 1,"
                                                   ).replace("input=16-200", "input=480-500"))
    code = main(["run", str(tmp_path / "t.yaml"), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "more than the model's context" in err
    assert not (tmp_path / "run").exists()


def test_a_malformed_trace_is_one_line_naming_file_and_line(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n'
                     '{"timestamp": 5, "input_length": "ten", "output_length": 5, '
                     '"hash_ids": [1]}\n')
    (tmp_path / "s.yaml").write_text(f"name: s\nworkloads:\n  - id: t\n    workload: "
                                     f"trace-replay\n    params: {{trace: {trace}}}\n")
    code = main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"{trace}:2:" in err[0]
    assert not (tmp_path / "run").exists()
