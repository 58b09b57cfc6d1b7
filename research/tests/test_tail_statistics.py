"""research/tail_statistics.py: alternative tail statistics re-judged from stored runs' step
tables: a planted uniform slowdown is flagged by every statistic, a no-change run by none,
and runs are tallied by the candidate's recorded faults."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd

spec = importlib.util.spec_from_file_location(
    "tail_statistics", Path(__file__).resolve().parents[1] / "tail_statistics.py")
tail_statistics = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tail_statistics)


def _run(path: Path, slow: float, faults: list[str], seed: int,
         canary: set[int] | None = None) -> Path:
    """12 waves; `canary`: the waves the canary marks slow (None: no canary column)."""
    rng = np.random.default_rng(seed)
    rows = []
    for wave in range(12):
        level = rng.lognormal(0, 0.02)          # a small per-wave level, shared by both sides
        for side, factor in (("baseline", 1.0), ("candidate", 1.0 + slow)):
            for i, d in enumerate(rng.lognormal(np.log(0.5), 0.2, size=200) * level * factor):
                row = dict(side=side, wave=wave, duration_ms=d)
                if canary is not None:     # a marked wave: the machine took 4 ms of a step
                    row["machine_lost_ms"] = 4.0 if wave in canary and i == 9 else 0.0
                rows.append(row)
    path.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(path / "steps.csv", index=False)
    (path / "summary.json").write_text(json.dumps(dict(verdict="pass", checks=[],
                                                       candidate_faults=faults)))
    (path / "manifest.json").write_text(json.dumps(dict(results_format=1)))
    return path


def test_a_planted_slowdown_is_flagged_by_every_statistic_and_no_change_by_none(tmp_path):
    slow = tail_statistics.judge_run(_run(tmp_path / "s", 0.30, ["slow-step:30"], 1), 0.05, 0.05)
    same = tail_statistics.judge_run(_run(tmp_path / "c", 0.0, [], 2), 0.05, 0.05)
    assert set(tail_statistics.STATISTICS) < set(slow)
    assert slow.pop("wave P99, canary-quiet waves") is None      # no canary: not measured
    assert all(flag and est > 0.15 for est, flag in slow.values()), slow
    assert not any(flag for _, flag in filter(None, same.values())), same


def test_canary_marked_waves_are_left_out_of_the_quiet_p99(tmp_path):
    run = _run(tmp_path / "k", 0.30, ["slow-step:30"], 5, canary={0, 1, 2})
    steps = pd.read_csv(run / "steps.csv")
    assert tail_statistics.disturbed_waves(steps) == {0, 1, 2}
    res = tail_statistics.judge_run(run, 0.05, 0.05)
    est, flag = res["wave P99, canary-quiet waves"]
    assert flag and est > 0.15
    # too few quiet waves left: not measured
    run = _run(tmp_path / "k2", 0.30, ["slow-step:30"], 6, canary=set(range(8)))
    assert tail_statistics.judge_run(run, 0.05, 0.05)["wave P99, canary-quiet waves"] is None


def test_the_table_tallies_runs_by_plan(tmp_path, capsys):
    _run(tmp_path / "a" / "clean-00", 0.0, [], 3)
    _run(tmp_path / "a" / "slow30-00", 0.30, ["slow-step:30"], 4)
    assert tail_statistics.main([str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "clean" in out and "slow-step:30" in out and "0/1" in out and "1/1" in out
    assert tail_statistics.main([str(tmp_path / "none")]) == 2


def test_runs_joined_to_more_waves_are_judged_with_the_gate_test(tmp_path, capsys):
    def ratios(run):
        return tail_statistics.quiet_p99_log_ratios(pd.read_csv(run / "steps.csv"))
    slow = [ratios(_run(tmp_path / f"s{i}", 0.10, ["slow-step:10"], 10 + i)) for i in range(3)]
    same = [ratios(_run(tmp_path / f"c{i}", 0.0, [], 20 + i)) for i in range(3)]
    assert all(len(r) == 12 for r in slow)
    joined = tail_statistics.pooled_waves(slow, 24, 0.05, 0.05)
    assert len(joined) == 3 and all(f and e > 0.05 for e, _, f in joined), joined
    assert not any(f for *_, f in tail_statistics.pooled_waves(same, 24, 0.05, 0.05))
    assert tail_statistics.pooled_waves(same, 37, 0.05, 0.05) is None   # 36 waves in all
    for name, r in (("clean-00", same), ("slow10-00", slow)):
        _run(tmp_path / "study" / name, 0.10 if r is slow else 0.0,
             ["slow-step:10"] if r is slow else [], 30)
    assert tail_statistics.main(["--pool-waves", "12", str(tmp_path / "study")]) == 0
    out = capsys.readouterr().out
    assert "joined to 12 waves" in out and "slow-step:10: 1/1" in out and "projected" in out
    assert tail_statistics.main(["--pool-waves", "3", str(tmp_path / "study")]) == 2


def test_the_decode_rows_see_through_a_wave_prefills(tmp_path):
    """Only the 2 prefills of each wave got 30 % slower: the Harrell-Davis P99 of all steps
    weighs them in and flags it; the decode steps' P99s stay put."""
    rng = np.random.default_rng(40)
    rows = []
    for wave in range(12):
        for side, factor in (("baseline", 1.0), ("candidate", 1.3)):
            for i, d in enumerate(rng.lognormal(np.log(0.5), 0.2, size=200)):
                prefill = i < 2
                rows.append(dict(side=side, wave=wave, kind="mixed" if prefill else "decode",
                                 duration_ms=d * 30 * factor if prefill else d))
    run = tmp_path / "prefills"
    run.mkdir()
    pd.DataFrame(rows).to_csv(run / "steps.csv", index=False)
    (run / "summary.json").write_text(json.dumps(dict(verdict="pass", checks=[],
                                                      candidate_faults=["slow-step:30"])))
    (run / "manifest.json").write_text(json.dumps(dict(results_format=1)))
    res = tail_statistics.judge_run(run, 0.05, 0.05)
    assert res["wave P99 (Harrell-Davis)"][1] is True
    assert res["decode: wave P99 (Harrell-Davis)"][1] is False
    assert res["decode: wave P99"][1] is False
