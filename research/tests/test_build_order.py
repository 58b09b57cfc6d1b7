"""research/build_order_from_runs.py: A/A runs split by the order their engines were built
in, read back through the results layer."""
import importlib.util
import json
from pathlib import Path

from mrbench.harness.record.run_record import RunVerdict, Verdict


def _summary(faults, flags, delta=0.0):
    """A run of gpu-quick's gsm8k entry (as tests/unit/test_power_aggregate.py writes one): `flags` names the latency metrics it flagged."""
    checks = [dict(workload="gsm8k", metric=m, delta=delta, ci=[delta - 0.02, delta + 0.02],
                   p_value=0.5, threshold="+3% and significant",
                   verdict=Verdict.REGRESSION if m in flags else Verdict.PASS)
              for m in ("median_step_ms", "p99_step_ms")]
    return dict(verdict=RunVerdict.REGRESSION if flags else RunVerdict.PASS,
                suite="gpu-quick.gsm8k",
                target="bundled", baseline="v2", candidate="v2", candidate_faults=faults,
                checks=checks, failures=[], wall_s=70.0)



def test_the_build_order_script_splits_a_a_runs_by_the_order_recorded(tmp_path, capsys):
    """Runs are grouped by the manifest's isolation.build_first (runs from before it was
    recorded built the candidate first); the two orders' means and their Welch difference
    are printed, the figure drawn; a ruler run is refused."""
    spec = importlib.util.spec_from_file_location(
        "build_order_from_runs", Path(__file__).resolve().parents[1] / "build_order_from_runs.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    deltas = {"c": [0.02, 0.03, 0.01, 0.02], "b": [-0.01, 0.0, -0.02]}
    for o, ds in deltas.items():
        for i, d in enumerate(ds):
            run = tmp_path / "runs" / f"{o}{i}"
            run.mkdir(parents=True)
            (run / "summary.json").write_text(json.dumps(_summary([], [], d)))
            if o == "b":
                iso = {"build_first": "baseline"}
            else:                                   # c0: a run from before the record
                iso = {"build_first": "candidate"} if i else {}
            (run / "manifest.json").write_text(json.dumps({"isolation": iso}))
    png = tmp_path / "bo.png"
    assert script.main(["gpu-quick:gsm8k", str(tmp_path / "runs"), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "median_step_ms             candidate first:   4 runs  mean  +2.00 %" in out
    assert "median_step_ms              baseline first:   3 runs  mean  -1.00 %" in out
    assert "candidate-first minus baseline-first: +3.00 %" in out and "Welch t" in out
    assert png.read_bytes()[:4] == b"\x89PNG"
    ruler = tmp_path / "runs" / "r0"
    ruler.mkdir()
    (ruler / "summary.json").write_text(json.dumps(_summary(["slow-step:7.6"], [], 0.08)))
    assert script.main(["gpu-quick:gsm8k", str(tmp_path / "runs")]) == 2
    assert "carry candidate faults" in capsys.readouterr().err
