"""Scheduler-step traces: a V1 recording replays identically on V1 and V2, and the
stale-slot-state fault is pinned to its first divergent step and request."""
import json

import pytest

from mrbench.contract import BadInput
from mrbench.harness.cli import main
from mrbench.harness.run.targets.bundled import steptrace
from mrbench.workloads.prompts import STOP, gsm8k_prompts


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("steps") / "pd.jsonl"
    header = steptrace.record(gsm8k_prompts(1000003, 6), 320, list(STOP), path, runner="v1",
                              pd_disagg=True, max_num_seqs=2)
    assert header["steps"] > 50
    return path


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_clean_replay_agrees_step_by_step(trace, runner):
    res = steptrace.replay(trace, runner)
    assert res.first is None and res.diverged_steps == 0
    assert res.steps == json.loads(trace.read_text().splitlines()[0])["steps"]


def test_stale_slot_state_names_the_first_divergent_step(trace, capsys):
    code = main(["steps", "replay", str(trace), "--runner", "v2", "--fault", "stale-slot-state",
                 "--json"])
    res = json.loads(capsys.readouterr().out)
    assert code == 1
    first = res["first"]
    assert first["instance"] == "decode"          # the decode side reuses slots without prefill
    assert first["recorded"] != first["replayed"]
    lines = trace.read_text().splitlines()
    event = json.loads(lines[first["event_index"] - 1])
    assert event["event"] == "step" and event["step"] == first["step"]
    assert first["req_id"] in event["sampled"]


def test_cli_clean_replay_exit_0(trace, capsys):
    assert main(["steps", "replay", str(trace), "--runner", "v2"]) == 0
    assert "agrees with the recording on all" in capsys.readouterr().out


def test_malformed_traces_name_the_line(trace, tmp_path):
    lines = trace.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines[:3] + ["{not json"] + lines[3:]) + "\n")
    with pytest.raises(BadInput, match=r"bad.jsonl:4: not JSON"):
        steptrace.replay(bad, "v2")
    hdr = tmp_path / "hdr.jsonl"
    hdr.write_text('{"event": "header"}\n')
    with pytest.raises(BadInput, match=r"hdr.jsonl:1: not a mrbench-steptrace/1 header"):
        steptrace.replay(hdr, "v2")
    with pytest.raises(BadInput, match="does not exist"):
        steptrace.replay(tmp_path / "none.jsonl", "v2")
