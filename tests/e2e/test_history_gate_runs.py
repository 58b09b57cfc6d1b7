"""`run --history DB` on real runs: a candidate slowdown that the run's own (loose,
V2-against-V1) bar lets pass moves the ratio over the earlier nights', and is caught there."""
import json

import pytest

from mrbench.harness.cli import main

pytestmark = pytest.mark.slow       # harness runs with engines: CI runs them

# The own median bar is loose, as a V2-against-V1 bar must be; the history bar is tight.
# The own bar is looser still than any V2-against-V1 bar: on a slow 2-core machine the
# ruler below moved the step by up to twice its share (docs/detection-power.md, "The ruler")
SUITE = """name: hist
thresholds: {median_rel: 3.0, history_rel: 0.25, latency_metrics: [median_step_ms]}
workloads:
  - id: g
    workload: gsm8k
    params: {limit: 32, max_num_seqs: 4, wave_size: 4, profile_limit: 0, max_tokens: 32}
"""


def _check(out, metric):
    s = json.loads((out / "summary.json").read_text())
    return next(c for c in s["checks"] if c["metric"] == metric), s["verdict"]


def test_a_slowdown_under_the_own_bar_is_caught_against_the_history(tmp_path):
    (tmp_path / "s.yaml").write_text(SUITE)
    db = tmp_path / "h.sqlite"

    def run(name, *extra):
        out = tmp_path / name
        code = main(["run", str(tmp_path / "s.yaml"), "--history", str(db), "--out", str(out),
                     "--in-process", *extra])
        return code, out
    for i in range(3):                          # three clean nights
        code, out = run(f"night-{i}")
        c, _ = _check(out, "median_step_ms_vs_history")
        assert c["verdict"] == "info" and c["note"].startswith("not measured"), c
        assert main(["history", "add", str(out), "--db", str(db)]) == 0
    code, out = run("clean")
    c, verdict = _check(out, "median_step_ms_vs_history")
    assert c["verdict"] == "pass" and verdict == "pass", c
    code, out = run("slow", "--fault", "slow-step:40")
    own, _ = _check(out, "median_step_ms")
    c, verdict = _check(out, "median_step_ms_vs_history")
    assert own["verdict"] == "pass" and own["delta"] > 0.25, own     # under its 300 % bar
    assert c["verdict"] == "regression" and code == 1, c
