"""The report at a glance (issue 43): every check metric has a family, each cell of the
workloads x families matrix gives its worst check's figure against its structured bar,
regressions, errors and "not measured" are listed first with their evidence and a link to
their detail row, methods are said once, engine starts are a number, history becomes
sparklines; a campaign's report opens on its matrix, curve or table."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from support.history_runs import write_run
from test_report import assert_self_contained, scan

from mrbench.harness.record.campaign_record import FaultMatrix
from mrbench.harness.campaigns.calibrate import aggregate_calibration
from mrbench.harness.campaigns.power import aggregate_power
from mrbench.harness.cli import main
from mrbench.harness.record import history
from mrbench.harness.record.metrics import LATENCY
from mrbench.harness.record.run_record import Bar, BarKind, Check, DeltaKind, RunSummary
from mrbench.harness.record.suite import load_suite
from mrbench.harness.show.campaign_report import render_campaign
from mrbench.harness.show.formatting import (
    FAMILIES,
    NOT_MEASURED,
    OTHER,
    check_family,
    check_status,
    fmt_vs_bar,
)
from mrbench.harness.show.report import render_report

CHECKS_DIR = Path(__file__).resolve().parents[2] / "harness" / "checks"
METHOD = "per-wave P99 ratio over 12 ABBA waves: Hodges-Lehmann (90%)"
GPU = "NVIDIA H100 80GB HBM3"


# ---- families ------------------------------------------------------------------------

def _metrics_the_checks_make() -> set[str]:
    """Every metric name harness/checks/ spells out: the second argument of a Check (or of
    the helpers that make one), and what a module assigns to `metric`."""
    names = set()
    for path in CHECKS_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and len(node.args) > 1 and \
                    getattr(node.func, "id", None) in ("Check", "_unmeasured_check", "count_info"):
                arg = node.args[1]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    names.add(arg.value)
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple) \
                    and isinstance(node.value, ast.Tuple):
                for t, v in zip(node.targets[0].elts, node.value.elts):
                    if getattr(t, "id", None) == "metric" and isinstance(v, ast.Constant):
                        names.add(v.value)
    return names


def test_every_metric_the_check_modules_make_has_a_family():
    made = _metrics_the_checks_make()
    assert {"accuracy_strict", "syncs_per_step", "state_audit_violations",
            "unwarmed_dispatch", "mean_acceptance_length", "ops_per_step"} <= made  # the scan
    for metric in made | set(LATENCY) | {f"{m}_vs_history" for m in LATENCY}:
        assert check_family(metric) in FAMILIES, metric
    assert {check_family(m) for m in LATENCY} == {"latency"}
    assert check_family("p99_step_ms_vs_history") == "latency"
    assert check_family("state_audit_violations") == "state"
    assert check_family("chunked_prefill_coverage") == "coverage"
    assert check_family("mean_acceptance_length") == "correctness"
    assert check_family("throughput_tok_s") == OTHER


def _check(metric="p99_step_ms", **kw) -> Check:
    return Check(**dict(dict(workload="w", metric=metric, verdict="pass"), **kw))


def test_the_figure_against_its_bar_per_kind_of_bar():
    rel = dict(delta_kind=DeltaKind.RELATIVE, baseline=10.0, candidate=10.61, delta=0.061)
    assert fmt_vs_bar(_check(**rel, bar=Bar(kind=BarKind.MAX_RELATIVE_INCREASE, value=0.05))
                      ) == "+6.1 % / bar +5 %"
    assert fmt_vs_bar(_check(**rel, bar=Bar(kind=BarKind.MAX_RELATIVE_DECREASE, value=0.05))
                      ) == "+6.1 % / bar -5 %"
    assert fmt_vs_bar(_check("accuracy_strict", delta=-0.03, delta_kind="difference",
                             bar=Bar(kind=BarKind.MAX_DECREASE, value=0.02))
                      ) == "-0.03 / bar -0.02"
    assert fmt_vs_bar(_check("syncs_per_step", delta=1.0, delta_kind="difference",
                             bar=Bar(kind=BarKind.MAX_INCREASE, value=0.0))) == "+1 / bar +0"
    assert fmt_vs_bar(_check("state_audit_violations", candidate=2.0,
                             bar=Bar(kind=BarKind.MAX_VALUE, value=0.0))) == "2 / bar ≤ 0"
    assert fmt_vs_bar(_check("token_agreement", candidate=0.97,
                             bar=Bar(kind=BarKind.MIN_VALUE, value=0.99))) == "0.97 / bar ≥ 0.99"
    assert fmt_vs_bar(_check("sampled_distribution", p_value=0.003,
                             bar=Bar(kind=BarKind.SIGNIFICANCE, alpha=0.05))
                      ) == "p 0.003 / bar p < 0.05"
    assert fmt_vs_bar(_check(**rel, bar=Bar(kind=BarKind.NONE))) == "+6.1 %, not gated"
    # a run written before bars were recorded: its delta, read as relative where it is one
    assert fmt_vs_bar(_check(baseline=10.0, candidate=12.0, delta=0.2)) == \
        "+20 %, bar not recorded"


def test_a_reported_check_that_measured_nothing_is_not_measured():
    assert check_status(_check(verdict="info", note="not measured: under 6 waves left")) \
        == NOT_MEASURED
    assert check_status(_check(verdict="info", note="reported, not judged")) == "info"
    assert check_status(_check(verdict="error", note="not measured: no profiled step")) == "error"


# ---- the first screen ------------------------------------------------------------------

def _bar(kind, value=None, alpha=None):
    return dict(kind=kind, value=value, alpha=alpha)


def _checks(w: str, regressed: bool) -> list[dict]:
    lat = dict(workload=w, unit="ms", delta_kind="relative", method=METHOD,
               threshold="+5% and significant",
               bar=_bar("max_relative_increase", 0.05, 0.05))
    return [
        dict(lat, metric="p99_step_ms", baseline=10.0, candidate=11.0 if regressed else 10.1,
             delta=0.1 if regressed else 0.01, ci=[0.07, 0.13] if regressed else [-0.02, 0.04],
             p_value=1e-3 if regressed else 0.4, verdict="regression" if regressed else "pass"),
        dict(lat, metric="p99_itl_ms", baseline=5.0, candidate=5.1, delta=0.02,
             ci=[-0.01, 0.05], p_value=0.3, verdict="pass"),
        dict(lat, metric="median_step_ms", baseline=4.0, candidate=4.1, delta=0.025,
             verdict="info", method="-", note="not measured: under 6 waves left"),
        dict(workload=w, metric="accuracy_strict", unit="fraction", baseline=0.9,
             candidate=0.9, delta=0.0, ci=[-0.05, 0.05], p_value=1.0, verdict="pass",
             delta_kind="difference", method="mcnemar-exact",
             bar=_bar("max_decrease", 0.02, 0.05)),
        dict(workload=w, metric="syncs_per_step", unit="syncs/step", verdict="error",
             threshold="<= baseline + 0.0", method="-",
             note="not measured: no profiled step on the candidate",
             bar=_bar("max_increase", 0.0)),
    ]


def _manifest() -> dict:
    side = lambda runner, commit: dict(  # noqa: E731
        target="vllm", runner=runner, device="cuda", vllm_version="0.26.1",
        vllm_commit=commit, engine_name="vLLM 0.26.1", runner_class="GPUModelRunner",
        engine_start=dict(compile_cache_writes={}, pid=hash(runner) % 1000, side=runner))
    return dict(
        results_format=3, git_sha="abc123", created="2026-11-28T03:00:00",
        device=dict(cuda=GPU, cpu_count=16),
        sides=dict(baseline=dict(target="vllm", runner="v1", device="cuda", faults=[]),
                   candidate=dict(target="vllm", runner="v2", device="cuda",
                                  faults=["seq-lens-sync"])),
        resolved={w: dict(baseline=side("baseline", "b" * 40), candidate=side("candidate",
                                                                              "c" * 40))
                  for w in ("w1", "w2")},
        engines=dict(starts=[
            dict(side="candidate", workloads=["w1", "w2"], start_s=40.0,
                 compile_cache_writes=dict(inductor=10, triton=2)),
            dict(side="candidate", workloads=["w1", "w2"], start_s=20.0,
                 compile_cache_writes={}, phases=dict(process_s=3.0, open_s=16.9,
                                                      before_engine_s=9.0, engine_s=7.5,
                                                      compile_s=1.9, after_engine_s=0.4)),
            dict(side="baseline", workloads=["w1", "w2"], start_s=21.0,
                 compile_cache_writes={})]))


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "engine-logs").mkdir(parents=True)
    (run / "engine-logs" / "w1.candidate.log").write_text("INFO started\n")
    checks = _checks("w1", regressed=True) + _checks("w2", regressed=False)
    summary = RunSummary.build(checks, [], suite="gpu-quick", target="vllm", baseline="v1",
                               candidate="v2", candidate_faults=["seq-lens-sync"], wall_s=125.0)
    (run / "summary.json").write_text(json.dumps(summary.to_json_dict()))
    (run / "manifest.json").write_text(json.dumps(_manifest()))
    return run


def _text(html: str, start: str, end: str) -> str:
    """The text between two markers, tags stripped, whitespace collapsed."""
    part = html.split(start, 1)[1].split(">", 1)[1].split(end, 1)[0]
    return " ".join(re.sub(r"<[^>]+>", " ", part).split())


def test_the_first_screen_says_what_changed_where_and_by_how_much(tmp_path):
    html, s = scan(render_report(_run(tmp_path)))
    assert_self_contained(html, s)
    line = _text(html, 'id="verdict-line"', "</h1>")
    assert line.startswith("error gpu-quick")              # a check in error: the run's verdict
    for part in ("candidate vllm:v2 vLLM 0.26.1 @ cccccccccccc + fault seq-lens-sync",
                 "baseline vllm:v1 vLLM 0.26.1 @ bbbbbbbbbbbb", GPU, "2 min 5 s"):
        assert part in line, part
    # the matrix: one row per workload, one column per family, '—' where none
    rows = _text(html, 'id="matrix"', "</table>").split(" w2 ")
    assert rows[0].split(" w1 ")[1] == (
        "pass 0 / bar -0.02 accuracy_strict 1 check "
        "regression +10 % / bar +5 % p99_step_ms 3 checks: 1 regression, 1 not measured "
        "error not measured syncs_per_step 1 check: 1 error — —")
    assert rows[1].startswith("pass 0 / bar -0.02 accuracy_strict 1 check "   # not measured
                              "not measured +2.5 % / bar +5 % median_step_ms 3 checks: "
                              "1 not measured error")                    # outranks a pass
    cells = re.findall(r'<td class="(cell [a-z-]+|empty)"', html.split('id="matrix"')[1]
                       .split("</table>")[0])
    assert cells == ["cell pass", "cell regression", "cell error", "empty", "empty"] + \
        ["cell pass", "cell not-measured", "cell error", "empty", "empty"]
    # then what to act on, worst first, each with its evidence and a link to its row
    attention = _text(html, 'id="attention"', "</ol>")
    assert attention.startswith("Regressions, errors, not measured regression w1 / "
                                "p99_step_ms 10 → 11 ms · Δ +10 % · CI [+7 %, +13 %] · "
                                "p 0.001 · bar +5 % error w1 / syncs_per_step bar +0 "
                                "not measured: no profiled step on the candidate")
    order = re.findall(r'<li><span class="pill ([a-z-]+)">.*?<a href="#([^"]+)"',
                       html.split('id="attention"')[1], flags=re.S)
    assert [o[0] for o in order] == ["regression", "error", "error", "not-measured",
                                     "not-measured"]
    for _, anchor in order:
        assert f'id="{anchor}"' in html
    assert html.index('id="attention"') < html.index("<details")


def test_details_say_each_method_once_and_engine_starts_as_a_number(tmp_path):
    html, _ = scan(render_report(_run(tmp_path)))
    for w in ("w1", "w2"):
        section = html.split(f'id="wl-{w}"', 1)[1].split("</details>", 1)[0]
        assert section.count(METHOD) == 1          # two checks, one footnote
        assert section.count(f'href="#wl-{w}-M1"') == 2
    assert "compiled 12 files in 1 of 3 engine starts" in html
    assert 'href="engine-logs/w1.candidate.log"' in html
    assert html.count("w1.candidate.log") == 4     # the engines' section and w1's, link + text
    assert 'id="engine-starts"' in html.split('id="engines"')[1]
    # where a start's time went, where the start kept an account of it
    assert ("process 3.0 s, imports and setup 9.0 s, LLM() 7.5 s, compile 1.9 s, "
            "instrumentation 0.4 s") in html


def test_sparklines_of_each_gated_latency_figure_from_a_history(tmp_path, capsys):
    earlier = [write_run(tmp_path / "runs", day, ratio=1 + day / 100) for day in (1, 2, 3)]
    now = write_run(tmp_path / "runs", 4, ratio=1.09)
    summary = json.loads((now / "summary.json").read_text())
    for c in summary["checks"]:
        if c["metric"] == "p99_e2el_ms":
            c.update(delta_kind="relative", bar=_bar("max_relative_increase", 0.05, 0.05))
    (now / "summary.json").write_text(json.dumps(summary))
    db = tmp_path / "history.sqlite"
    assert history.add(db, [*earlier, now]) == 4
    assert main(["report", str(now), "--history", str(db)]) == 0
    html = (now / "report.html").read_text()
    assert html.count('<svg class="spark"') == 1       # only the gated one
    assert "p99_e2el_ms, candidate vs baseline in the last 4 comparable runs, this one " \
           "last: +1 %, +2 %, +3 %, +9 %; bar +5 %" in html
    assert "3 earlier runs found" in html
    assert main(["report", str(now), "--history", str(tmp_path / "none.sqlite")]) == 2
    assert "does not exist" in capsys.readouterr().err


# ---- campaigns ------------------------------------------------------------------------

def test_a_faults_report_opens_on_its_catch_matrix(tmp_path):
    res = FaultMatrix(suite="quick", baseline="v1", candidate="v2", target="bundled",
                      clean=dict(verdict="pass", false_alarms=0, flagged=[], exit=0),
                      faults={"seq-lens-sync": dict(by=["gsm8k/syncs_per_step"], caught=True,
                                                    verdict="regression", exit=1,
                                                    dir="seq-lens-sync")},
                      not_run={"stale-slot-state": "nothing to reset on this build"})
    html = render_campaign(tmp_path, "faults", res).read_text()
    head = html.split("</h1>", 1)[1]
    assert re.sub(r"\s+", " ", head.split('<table id="matrix-table">')[0]).count("<p") == 1
    assert head.index('id="matrix-table"') < head.index("Each row is one run")
    assert "stale-slot-state</b>: not run" in html


def _summary(faults, delta, flagged):
    checks = [dict(workload="g", metric="median_step_ms", delta=delta,
                   ci=[delta - 0.01, delta + 0.01], p_value=0.01 if flagged else 0.5,
                   threshold="+3%", verdict="regression" if flagged else "pass")]
    return RunSummary.build(checks, [], suite="gpu-quick.gsm8k", target="bundled",
                            baseline="v2", candidate="v2", candidate_faults=faults)


@pytest.mark.parametrize("kind", ["power", "calibrate"])
def test_power_and_calibrate_reports_open_on_their_curve_or_table(tmp_path, kind):
    suite = load_suite("gpu-quick:gsm8k")
    clean = [(_summary([], d, False), 0) for d in (0.0, 0.01, -0.01)]
    if kind == "power":
        res = aggregate_power(suite, clean + [(_summary(["slow-step:5"], 0.05, True), 1)])
        first = '<p><img alt="power curve"'
    else:
        res = aggregate_calibration(suite, clean)
        first = '<table id="calibration-table">'
    html = render_campaign(tmp_path, kind, res).read_text()
    # the title and subtitle, the section's heading, then at once the curve or the table
    head = html.split("</h1>", 1)[1]
    assert head.split("</h2>", 1)[1].lstrip().startswith(first)
