"""A power study's table from run summaries: clean and ruler runs told apart by the
candidate's recorded faults, any number of each (a study split over GPU jobs), the MDE
only where every larger size also reached the target, and what each size moved."""
import json
import shutil
from pathlib import Path

import pytest

from mrbench.contract import BadInput
from mrbench.harness.campaigns.power import aggregate_power, ruler_pct
from mrbench.harness.cli import main
from mrbench.harness.record.run_record import RunSummary, Verdict
from mrbench.harness.record.study_record import ReadBack, read_calibration, read_power_study
from mrbench.harness.record.suite import load_suite

SUITE = load_suite("gpu-quick:gsm8k")


def _summary(faults, flags, delta=0.0):
    """A run of gpu-quick's gsm8k entry: `flags` names the latency metrics it flagged."""
    checks = [dict(workload="gsm8k", metric=m, delta=delta, ci=[delta - 0.02, delta + 0.02],
                   p_value=0.5, threshold="+3% and significant",
                   verdict=Verdict.REGRESSION if m in flags else Verdict.PASS)
              for m in ("median_step_ms", "p99_step_ms")]
    return RunSummary.build(checks, [], suite="gpu-quick.gsm8k", target="bundled",
                            baseline="v2", candidate="v2", candidate_faults=faults,
                            wall_s=70.0)


def _runs():
    clean = [(_summary([], []), 0) for _ in range(4)] + [(_summary([], ["p99_step_ms"]), 1)]
    at5 = [(_summary(["slow-step:5"], ["median_step_ms"] + (["p99_step_ms"] if i < 3 else []),
                     0.05 + i / 1000), 1) for i in range(4)]
    at10 = [(_summary(["slow-step:10"], ["median_step_ms"] + (["p99_step_ms"] if i < 1 else []),
                      0.10), 1) for i in range(3)]
    return clean + at5 + at10


def test_counts_per_setting_the_mde_and_what_each_size_moved():
    res = aggregate_power(SUITE, _runs())
    assert res.pcts == [5.0, 10.0] and res.runs_per_plan == {"clean": 5, "5": 4, "10": 3}
    assert res.n == 3
    med, p99 = res.checks["gsm8k/median_step_ms"], res.checks["gsm8k/p99_step_ms"]
    assert (med.false_alarms, med.aa_runs) == (0, 5) and med.mde_pct == 5
    d10 = med.detection["10"]
    assert (d10.detected, d10.runs, d10.rate) == (3, 3, 1.0)
    assert 0.3 < d10.rate_ci[0] < 1.0 == d10.rate_ci[1]
    # P99: 3/4 at 5 %, 1/3 at 10 %: no size from which every larger one reached 80 %
    assert p99.false_alarms == 1 and p99.detection["5"].rate == 0.75
    assert p99.mde_pct is None
    assert (med.bar, p99.bar) == (0.03, 0.05)   # the entry's median_rel, latency_rel
    assert res.realized_pct["5"]["median_step_ms"] == pytest.approx(5.15)
    assert res.realized_pct["10"]["median_step_ms"] == pytest.approx(10.0)
    json.dumps(res.file_json(), allow_nan=False)    # no NaN where a setting ran nothing


def test_a_setting_without_runs_is_not_measured_and_other_faults_are_refused():
    res = aggregate_power(SUITE, _runs()[:5], pcts=[5.0])
    d = res.checks["gsm8k/median_step_ms"].detection["5"]
    assert d.runs == 0 and d.rate is None and d.rate_ci is None
    assert res.checks["gsm8k/median_step_ms"].mde_pct is None
    assert ruler_pct(_summary(["slow-step:7.6"], [])) == 7.6
    assert ruler_pct(_summary([], [])) is None
    with pytest.raises(BadInput, match="neither clean"):
        aggregate_power(SUITE, [(_summary(["seq-lens-sync"], []), 0)])
    other = _summary([], []).model_copy(update=dict(target="vllm"))
    with pytest.raises(BadInput, match="different comparisons"):
        aggregate_power(SUITE, _runs() + [(other, 0)])


def _write_runs(root: Path, place) -> None:
    """_runs() as finished runs' summary.json files, each under root/place(i, summary)."""
    for i, (s, _) in enumerate(_runs()):
        d = root / place(i, s) / f"r{i:02d}"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps(s.to_json_dict()))


def test_power_reads_back_the_pieces_of_a_study_from_several_directories(tmp_path, capsys):
    """`mrbench power --from-runs`: the pieces of a study that several GPU jobs ran, also
    inside a campaign's hidden `.NAME.*` directory, judged as the command judges its own
    runs; --out writes power.json, report.html and each figure as a PNG."""
    _write_runs(tmp_path, lambda i, _: Path("lease1" if i % 2 else "lease2") / ".power-x.abc")
    pieces = [str(tmp_path / "lease1"), str(tmp_path / "lease2")]
    out = tmp_path / "study"
    assert main(["power", "gpu-quick:gsm8k", "--from-runs", *pieces, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "clean 5, +5 % 4, +10 % 3" in text and "slow-step:5 moved median_step +5.2 %" in text
    assert f"results: {out}" in text
    res = read_power_study(out)                  # a campaign's result, format checked
    assert res.runs_per_plan["10"] == 3 and res.read_back.waves is None
    in_read_order = _runs()[1::2] + _runs()[::2]         # lease1's runs, then lease2's
    assert res == aggregate_power(SUITE, in_read_order).model_copy(
        update=dict(read_back=ReadBack(dirs=pieces, waves=None)))
    assert 'id="estimates"' in (out / "report.html").read_text()
    for png in ("power-curve.png", "estimates.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    # --json: the JSON on stdout, as the command prints it
    assert main(["power", "gpu-quick:gsm8k", "--from-runs", *pieces, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs_per_plan"] == {"clean": 5, "5": 4, "10": 3}


@pytest.mark.parametrize("args, message", [
    (["gpu-quick:gsm8k", "--from-runs", "{tmp}/empty"], "no run summary.json"),
    (["gpu-quick:gsm8k", "--from-runs", "{tmp}/lease1", "{tmp}/nowhere"],
     "no such directory: {tmp}/nowhere"),
    (["quick", "--from-runs", "{tmp}/lease1"], "not runs of quick"),   # same entry id
    (["gpu-quick:gsm8k", "--from-runs", "{tmp}/lease1", "{tmp}/other"],
     "different comparisons"),
    (["gpu-quick:gsm8k", "--from-runs", "{tmp}/lease1", "-n", "3"], "-n runs a campaign"),
    (["gpu-quick:gsm8k", "--from-runs", "{tmp}/lease1", "--pcts", "5"], "--pcts runs"),
    (["gpu-quick:gsm8k", "--from-runs", "{tmp}/lease1", "--waves", "0"], "at least 1"),
    (["gpu-quick:gsm8k", "--waves", "96"], "--waves goes with --from-runs"),
])
def test_power_read_back_refuses_bad_input_in_one_line_writing_nothing(
        tmp_path, capsys, args, message):
    _write_runs(tmp_path, lambda i, _: "lease1")
    (tmp_path / "empty").mkdir()
    other = tmp_path / "other" / "r"
    other.mkdir(parents=True)
    (other / "summary.json").write_text(json.dumps(
        _summary([], []).model_copy(update=dict(target="vllm")).to_json_dict()))
    before = sorted(tmp_path.rglob("*"))
    out = tmp_path / "out"
    argv = ["power", *(x.format(tmp=tmp_path) for x in args), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message.format(tmp=tmp_path) in err, err
    assert sorted(tmp_path.rglob("*")) == before          # no --out, no hidden piece of it


def test_calibrate_read_back_takes_a_power_studys_clean_runs_and_refuses_its_ruler_runs(
        tmp_path, capsys):
    """`mrbench calibrate --from-runs`: A/A runs only (a power study's clean runs are
    that), the command's table and exit code: 1 when a rate is above --max-rate."""
    _write_runs(tmp_path, lambda i, s: "ruler" if s.candidate_faults else "clean")
    clean = str(tmp_path / "clean")
    # one clean run of five flagged P99: 20 % > the default --max-rate 0.10
    assert main(["calibrate", "gpu-quick:gsm8k", "--from-runs", clean]) == 1
    text = capsys.readouterr().out
    assert "5 runs of gpu-quick.gsm8k" in text and "results:" not in text
    out = tmp_path / "aa"
    assert main(["calibrate", "gpu-quick:gsm8k", "--from-runs", clean, "--max-rate", "0.2",
                 "--out", str(out)]) == 0
    assert f"results: {out}" in capsys.readouterr().out
    res = read_calibration(out)
    assert res.n == 5 and res.checks["gsm8k/p99_step_ms"].false_alarms == 1
    assert "mrbench calibrate: gpu-quick.gsm8k x 5" in (out / "report.html").read_text()
    assert main(["calibrate", "gpu-quick:gsm8k", "--from-runs", clean, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["max_rate"] == 0.2
    assert main(["calibrate", "gpu-quick:gsm8k", "--from-runs", str(tmp_path)]) == 2
    assert "carry candidate faults" in capsys.readouterr().err
    assert main(["calibrate", "gpu-quick:gsm8k", "--from-runs", clean, "-n", "5"]) == 2
    assert "-n runs a campaign" in capsys.readouterr().err


def test_the_rulers_own_account_is_set_beside_what_moved():
    """A ruler that hides (busy time the device waited through anyway) shows as 'added
    7.6, moved 2': the runs' `ruler_added_pct` is aggregated per size and printed."""
    from mrbench.harness.show.formatting import fmt_realized
    runs = []
    for i, added in enumerate((7.4, 7.6, 7.9)):
        s = _summary(["slow-step:7.6"], [], 0.02)
        s.metrics = {"gsm8k": {"candidate": {"ruler_added_pct": added},
                               "baseline": {"median_step_ms": 0.4}}}
        runs.append((s, 0))
    runs.append((_summary([], []), 0))                # a clean run, no metrics at all
    res = aggregate_power(SUITE, runs)
    assert res.ruler_added_pct == {"7.6": pytest.approx(7.6)}
    (line,) = fmt_realized(res)
    assert line.startswith("slow-step:7.6 added +7.6 % (its own account), moved median_step +2.0 %")
    json.dumps(res.file_json(), allow_nan=False)


def test_ruler_added_pct_is_the_busy_share_of_the_slowed_steps():
    """latency.ruler_added_pct: busy time over the slowed steps' time without it; steps
    the ruler did not see (no `ruler_ms`, NaN from a CSV, or 0) are left out; None
    without a ruler."""
    from types import SimpleNamespace

    from mrbench.harness.checks.latency import ruler_added_pct
    steps = [dict(duration_ms=1.1, ruler_ms=0.1), dict(duration_ms=2.2, ruler_ms=0.2),
             dict(duration_ms=5.0, ruler_ms=0.0), dict(duration_ms=9.0),
             dict(duration_ms=9.0, ruler_ms=float("nan"))]
    assert ruler_added_pct(SimpleNamespace(steps=steps)) == pytest.approx(10.0)
    assert ruler_added_pct(SimpleNamespace(steps=steps[3:])) is None


def test_the_estimates_figure_puts_each_run_against_its_checks_bar():
    """One panel per judged latency check: every run's estimate in its setting's column,
    filled where the run flagged the check, the bar as a line at the check's own bar."""
    from mrbench.harness.show.campaign_report import power_figures
    res = aggregate_power(SUITE, _runs())
    fig = power_figures(res)["estimates"]
    panels = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
    assert set(panels) == {"gsm8k/median_step_ms", "gsm8k/p99_step_ms"}
    for name, want_flagged in (("gsm8k/median_step_ms", 7), ("gsm8k/p99_step_ms", 5)):
        ax = panels[name]
        points = [(tuple(xy), c.get_facecolors()) for c in ax.collections
                  for xy in c.get_offsets()]
        assert len(points) == 12                         # 5 clean, 4 at +5 %, 3 at +10 %
        filled = sum(1 for _, fc in points if len(fc) and fc[0][3] > 0)
        assert filled == want_flagged
        bars = [line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"]
        assert bars == [pytest.approx(100 * res.checks[name].bar)]
        cols = sorted({round(x) for (x, _), _ in points})
        assert cols == [0, 1, 2]                          # clean, +5 %, +10 %


def test_a_run_read_twice_is_refused_and_nested_directories_count_once(tmp_path, capsys):
    """A copy of a study's pieces beside the original would count each run twice (every
    rate and projection then claims runs that never happened): one line, exit 2. A
    directory named inside another is the same files, read once."""
    _write_runs(tmp_path, lambda i, _: "lease1")
    for i, d in enumerate(sorted((tmp_path / "lease1").iterdir())):
        (d / "manifest.json").write_text(json.dumps({"created": f"2026-11-28T00:00:{i:02d}"}))
    lease1 = str(tmp_path / "lease1")
    assert main(["power", "gpu-quick:gsm8k", "--from-runs", lease1, f"{lease1}/r00",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs_per_plan"]["clean"] == 5
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copytree(tmp_path / "lease1" / "r02", copy / "r02")
    assert main(["power", "gpu-quick:gsm8k", "--from-runs", lease1, str(copy)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "one run read twice" in err and "r02" in err
