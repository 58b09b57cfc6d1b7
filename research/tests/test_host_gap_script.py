"""research/host_gap_from_runs.py: a TPOT shift that lives in the host gap between steps is
told from one in the step, and each side's engine start is shown beside it."""
import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

spec = importlib.util.spec_from_file_location(
    "host_gap_from_runs", Path(__file__).resolve().parents[1] / "host_gap_from_runs.py")
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)


def _run(path: Path, gap_ms: dict, step_ms: dict) -> None:
    """A run of 12 waves, each side 40 decode steps a wave, back to back with the given gap;
    tokens one per step, so TPOT = step + gap."""
    rng = np.random.default_rng(1)
    steps, reqs, t = [], [], 0.0
    for wave in range(12):
        for side in ("candidate", "baseline"):
            for i in range(40):
                d = step_ms[side] * (1 + 0.01 * rng.standard_normal())
                steps.append(dict(workload="w", side=side, instance="colocated", wave=wave,
                                  step=i, t_start_s=t, duration_ms=d, kind="uniform_decode"))
                t += (d + gap_ms[side]) / 1e3
            reqs += [dict(workload="w", side=side, wave=wave,
                          tpot_ms=step_ms[side] + gap_ms[side]) for _ in range(4)]
    path.mkdir(parents=True)
    pd.DataFrame(steps).to_csv(path / "steps.csv", index=False)
    pd.DataFrame(reqs).to_csv(path / "requests.csv", index=False)
    (path / "summary.json").write_text("{}")
    start = {"compile_cache_writes": {"triton": 30}}
    (path / "manifest.json").write_text(json.dumps({"resolved": {"w": {
        "candidate": {"startup_s": 11.4, "engine_start": start},
        "baseline": {"startup_s": 5.2}}}}))


def test_a_gap_shift_is_read_as_a_gap_shift_and_the_cold_start_is_shown(tmp_path, capsys):
    _run(tmp_path / "runs" / "cold", gap_ms={"candidate": 0.165, "baseline": 0.15},
         step_ms={"candidate": 0.45, "baseline": 0.45})
    assert script.main([str(tmp_path / "runs")]) == 0
    [line] = capsys.readouterr().out.splitlines()
    gap = re.search(r"gap +([-+][0-9.]+) %", line)
    assert gap and abs(float(gap.group(1)) - 10.0) < 0.5, line
    assert "cand 11.4 s (compiled (30 files in the triton cache))" in line
    assert "base 5.2 s (?)" in line
    run = tmp_path / "runs" / "cold"
    est = script.wave_log_ratios(pd.read_csv(run / "steps.csv"),
                                 pd.read_csv(run / "requests.csv"))
    assert abs(np.expm1(np.median(est["gap"])) - 0.10) < 0.005
    assert abs(np.median(est["step"])) < 0.01
    assert abs(np.expm1(np.median(est["tpot"])) - 0.025) < 0.001      # 0.015 of 0.6 ms
    assert est["gap"].size == 12


def test_no_runs_is_one_line_and_exit_2(tmp_path, capsys):
    assert script.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("host_gap_from_runs: no run summary.json")
