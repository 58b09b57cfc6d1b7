"""research/machine_storm.py: a planted machine stall is seen by a real canary as lost time
exactly over its timetable; the scorer counts marked and unmarked wave-sides against the
timetable; bad input exits 2."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mrbench.harness.measure import canary

SCRIPT = Path(__file__).resolve().parents[1] / "machine_storm.py"
spec = importlib.util.spec_from_file_location("machine_storm", SCRIPT)
storm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(storm)


def test_the_timetable_is_the_seeds_and_its_bursts_do_not_overlap():
    a = storm.timetable(3, 0.5, 0.1, 100.0, 400.0)
    assert a == storm.timetable(3, 0.5, 0.1, 100.0, 400.0)
    assert a != storm.timetable(4, 0.5, 0.1, 100.0, 400.0)
    starts = np.array([t0 for t0, _ in a])
    ends = np.array([t1 for _, t1 in a])
    assert starts[0] >= 100.0 and starts[-1] < 400.0
    assert np.allclose(ends - starts, 0.1)
    gaps = starts[1:] - ends[:-1]
    assert (gaps > 0).all()
    assert 0.4 < gaps.mean() < 0.6                       # exponential, mean 0.5


def _steps(marked_waves: set[tuple[str, int]]) -> pd.DataFrame:
    """Two sides, 4 waves of 10 steps of 10 ms each, side after side; the canary says the
    machine took 20 ms from each step of `marked_waves` (a whole step: marked)."""
    rows, t = [], 1000.0
    for wave in range(4):
        for side in ("baseline", "candidate"):
            for _ in range(10):
                lost = 20.0 if (side, wave) in marked_waves else 0.0
                rows.append(dict(side=side, wave=wave, t_start_s=t, duration_ms=10.0,
                                 machine_lost_ms=lost))
                t += 0.01
    return pd.DataFrame(rows)


def test_the_scorer_counts_marks_against_the_timetable():
    # wave-sides in time order: (b,0) 1000.0-1000.1, (c,0) -1000.2, (b,1) -1000.3, ...
    table = pd.DataFrame({"start_s": [1000.052, 1000.553], "end_s": [1000.068, 1000.578]})
    marked = {("baseline", 0), ("candidate", 3)}       # (b,0) hit; (c,2) missed; (c,3) false
    s = storm.score(table, _steps(marked))
    assert s["wave_sides"] == 8
    assert (s["stormed_marked"], s["stormed_unmarked"]) == (1, 1)
    assert (s["quiet_marked"], s["quiet_unmarked"]) == (1, 5)
    assert s["steps_stormed"] == 2 + 3                  # steps overlapping 16 ms and 25 ms


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert storm.main(["run", "--cpus", "9999", "--log", str(tmp_path / "l.csv")]) == 2
    assert storm.main(["run", "--cpus", "0", "--log", str(tmp_path / "l.csv"),
                       "--burst-ms", "900"]) == 2
    assert storm.main(["check", str(tmp_path / "none.csv"), str(tmp_path)]) == 2
    pd.DataFrame({"start_s": [1.0], "end_s": [1.1]}).to_csv(tmp_path / "t.csv", index=False)
    assert storm.main(["check", str(tmp_path / "t.csv"), str(tmp_path)]) == 2
    assert not (tmp_path / "l.csv").exists()


def _cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def _can_outrank() -> bool:
    """Whether a spinner may take priority over normal threads (real-time or nice -20)."""
    probe = ("import os\ntry:\n os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))\n"
             "except OSError:\n os.nice(-20)")
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


@pytest.mark.skipif(len(_cpus()) < 2, reason="the canary needs a CPU of its own (2+ CPUs)")
@pytest.mark.skipif(not _can_outrank(), reason="no real-time or nice -20 here: a planted "
                    "stall could not outrank the canary")
def test_a_real_canary_marks_the_planted_stalls_and_only_around_them(tmp_path):
    cpu = _cpus()[-1]
    c = canary.Canary(cpu)
    try:
        log = tmp_path / "storm.csv"
        r = subprocess.run([sys.executable, str(SCRIPT), "run", "--cpus", str(cpu), "--log",
                            str(log), "--every", "0.4", "--burst-ms", "150", "--duration",
                            "2.0", "--seed", "1"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        table = pd.read_csv(log)
        assert len(table) >= 1
        t0, t1 = table["start_s"].to_numpy(), table["end_s"].to_numpy()
        inside = c.machine_lost_ms(t0 + 0.02, t0 + 0.05)
        assert (inside > 25).all(), inside                    # ~all 30 ms of each lost
        # well clear of every burst the machine runs at its own speed (a test run beside
        # may slow a few chunks, not most of them)
        probe = np.linspace(t0[0] - 0.45, t1[-1] + 0.3, 200)
        near = np.array([((p > t0 - 0.05) & (p < t1 + 0.05)).any() for p in probe])
        away = c.machine_lost_ms(probe[~near], probe[~near] + 0.002)
        away = away[~np.isnan(away)]
        assert len(away) > 20 and np.median(away) < canary.MIN_LOST_MS, away
    finally:
        c.close()
