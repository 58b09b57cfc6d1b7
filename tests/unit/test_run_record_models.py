"""The run record as models (harness/record/run_record.py): a check keeps NaN out of its
JSON, every check family says what its delta is and the bar it used, a run written in
results format 1 still reads, and the published JSON Schemas are the models'."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from mrbench.contract import BadInput, SideResult
from mrbench.harness.checks.compare import compare
from mrbench.harness.checks.correctness import parity_check
from mrbench.harness.checks.history_gate import history_checks
from mrbench.harness.cli import main
from mrbench.harness.commands.schema import schema_text
from mrbench.harness.measure import phases, prefill_chunks
from mrbench.harness.record.results import (
    RESULTS_FORMAT,
    read_manifest,
    read_record,
    read_run,
    read_summary,
)
from mrbench.harness.record.run_record import (
    Bar,
    BarKind,
    Check,
    DeltaKind,
    RunSummary,
    RunVerdict,
    Verdict,
)
from mrbench.harness.record.schemas import SCHEMAS
from mrbench.harness.record.suite import Thresholds
from mrbench.harness.show.markdown import run_markdown
from mrbench.harness.show.report import render_report

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())


# ---- one check, through JSON --------------------------------------------------------------

def test_a_check_round_trips_through_json_with_nan_as_null():
    c = Check("w", "p99_step_ms", "ms", 10.0, math.nan, math.inf, [math.nan, 0.2], math.nan,
              "+25% and significant", "m", Verdict.PASS, "n", delta_kind=DeltaKind.RELATIVE,
              bar=Bar(kind=BarKind.MAX_RELATIVE_INCREASE, value=0.25, alpha=0.05))
    text = json.dumps(c.to_dict(), allow_nan=False)          # no NaN token reaches the file
    d = json.loads(text)
    assert (d["candidate"], d["delta"], d["ci"], d["p_value"]) == (None, None, [None, 0.2], None)
    assert d["delta_kind"] == "relative" and d["verdict"] == "pass"
    assert d["bar"] == dict(kind="max_relative_increase", value=0.25, alpha=0.05, also={})
    back = Check.model_validate_json(text)
    assert back.verdict is Verdict.PASS and back.delta_kind is DeltaKind.RELATIVE
    assert back.bar == c.bar and back.candidate is None and back.baseline == 10.0
    assert back.to_dict() == d                               # stable from then on


# ---- every family says what its delta is ----------------------------------------------------

TH = Thresholds(latency_metrics=["p99_step_ms", "median_step_ms"], median_rel=0.1)
RAN = {f"ran_{p}": 1 for p in phases.PHASES}


def _side(rng, slow: float = 1.0, extra_op: int = 0) -> SideResult:
    """Both sides' figures for every check family: 8 ABBA waves of steps, scored and
    sampled requests with drafts, a profiled pass, audits, dispatch classes, the sync
    checker's and the prefill chunks' counters."""
    steps = [dict(wave=w, wave_pos=w % 2, duration_ms=float(x)) for w in range(8)
             for x in rng.lognormal(np.log(10 * slow), 0.2, 60)]
    requests, tokens = [], []
    for i in range(16):                 # 8 prompts, 2 samples each, two distinct streams
        requests.append(dict(req_index=i, correct_strict=bool(rng.random() < 0.8),
                             sample_group=i // 2, num_drafts=10.0,
                             num_accepted_tokens=float(rng.integers(5, 10)),
                             num_draft_tokens=20.0))
        tokens.append([1, 2, i % 2])
    profile = [dict(RAN, syncs_hot=0, ops=14 + extra_op, ops_forward=10,
                    ops_sample=4 + extra_op, allocs=2) for _ in range(3)]
    return SideResult(
        requests=requests, tokens=tokens, steps=steps, profile=profile,
        audits=[dict(instance="0", step=s, max_slack=0, allowed_slack=1) for s in range(3)],
        dispatch=[dict(kind="decode", phase="warmup"), dict(kind="decode", phase="serve")],
        counters={"sync_check_warnings": 0.0, "sync_check_armed": 1.0,
                  "sync_check_steps": 40.0, prefill_chunks.PROMPTS_3PLUS: 2.0,
                  prefill_chunks.MIDDLE: 3.0},
        resolved=dict(target="bundled", runner="v2", sampler="s",
                      chunked_prefill=dict(min_chunks=3)))


EXPECTED = {            # metric -> (what its delta is, which way its bar binds)
    "p99_step_ms": (DeltaKind.RELATIVE, BarKind.MAX_RELATIVE_INCREASE),
    "median_step_ms": (DeltaKind.RELATIVE, BarKind.MAX_RELATIVE_INCREASE),
    "accuracy_strict": (DeltaKind.DIFFERENCE, BarKind.MAX_DECREASE),
    "token_agreement": (DeltaKind.DIFFERENCE, BarKind.MIN_VALUE),
    "sampled_distribution": (DeltaKind.DIFFERENCE, BarKind.SIGNIFICANCE),
    "chunked_prefill_coverage": (DeltaKind.DIFFERENCE, BarKind.MIN_VALUE),
    "syncs_per_step": (DeltaKind.DIFFERENCE, BarKind.MAX_INCREASE),
    "sync_check_warnings": (DeltaKind.DIFFERENCE, BarKind.MAX_INCREASE),
    "ops_per_step": (DeltaKind.DIFFERENCE, BarKind.NONE),
    "allocs_per_step": (DeltaKind.DIFFERENCE, BarKind.NONE),
    "ops_vs_baseline": (DeltaKind.DIFFERENCE, BarKind.MAX_INCREASE),
    "launches_vs_baseline": (DeltaKind.DIFFERENCE, BarKind.MAX_INCREASE),
    "state_audit_violations": (DeltaKind.NONE, BarKind.MAX_VALUE),
    "ops_vs_reference": (DeltaKind.DIFFERENCE, BarKind.MAX_INCREASE),
    "unwarmed_dispatch": (DeltaKind.NONE, BarKind.MAX_VALUE),
    "mean_acceptance_length": (DeltaKind.RELATIVE, BarKind.MAX_RELATIVE_DECREASE),
    "cross_engine_parity": (DeltaKind.DIFFERENCE, BarKind.MIN_VALUE),
    "p99_step_ms_vs_history": (DeltaKind.RELATIVE, BarKind.MAX_RELATIVE_INCREASE),
}


def _assert_said(c: Check) -> None:
    """The check's delta kind and bar are set, agree with its figures, and a gated check
    has a bar that binds."""
    assert c.delta_kind != DeltaKind.UNKNOWN and c.bar is not None, c
    assert (c.delta_kind, c.bar.kind) == EXPECTED[c.metric], c.metric
    if c.verdict in (Verdict.PASS, Verdict.REGRESSION):
        assert c.bar.kind != BarKind.NONE, c
    if c.delta is None or c.baseline is None or c.candidate is None:
        return
    assert c.delta_kind != DeltaKind.NONE, c
    if c.delta_kind == DeltaKind.DIFFERENCE:
        assert c.delta == pytest.approx(c.candidate - c.baseline), c
    elif c.ci is None:                                   # a point figure, not an estimate
        assert c.delta == pytest.approx(c.candidate / c.baseline - 1), c
    assert json.loads(json.dumps(c.to_dict()))["delta_kind"] == c.delta_kind.value


def test_every_check_family_says_what_its_delta_is_and_the_bar_it_used(tmp_path):
    rng = np.random.default_rng(0)
    base, cand = _side(rng), _side(rng, slow=1.3, extra_op=1)
    checks = compare("w", base, cand, TH)
    assert {c.metric for c in checks} == set(EXPECTED) - {
        "cross_engine_parity", "p99_step_ms_vs_history"}, "a family is not exercised"
    assert {c.verdict for c in checks} >= {Verdict.PASS, Verdict.REGRESSION}
    for c in checks:
        _assert_said(c)
    by = {c.metric: c for c in checks}
    assert by["p99_step_ms"].bar.value == 0.25 and by["p99_step_ms"].bar.alpha == 0.05
    assert by["syncs_per_step"].bar.also == {"budget": 0.0}
    assert by["ops_vs_baseline"].bar.also == {"allocs": 0.0}
    # the families compare does not reach with these sides: across engines, the history
    other = SideResult(tokens=base.tokens, resolved=dict(target="vllm"))
    _assert_said(parity_check("w", base, other, TH))
    [hist] = history_checks([by["p99_step_ms"]], {}, tmp_path / "none.sqlite", lambda w: TH)
    _assert_said(hist)
    assert hist.verdict == Verdict.INFO                  # no history yet: not measured


def test_an_imported_runs_checks_are_reported_with_no_bar(tmp_path):
    fix = Path(__file__).resolve().parent / "fixtures" / "vllm_bench" / "latency_base.json"
    assert main(["import-bench", str(fix), "--out", str(tmp_path / "i")]) == 0
    s = read_summary(tmp_path / "i")
    assert s.verdict == RunVerdict.IMPORTED and s.checks
    assert {(c.delta_kind, c.bar.kind, c.verdict) for c in s.checks} == {
        (DeltaKind.NONE, BarKind.NONE, Verdict.INFO)}


# ---- older and newer runs -------------------------------------------------------------------

FORMAT_1_CHECK = dict(workload="g", metric="p99_step_ms", unit="ms", baseline=10.0,
                      candidate=12.0, delta=0.2, ci=[0.1, 0.3], p_value=0.01,
                      threshold="+5% and significant", method="m", verdict="regression",
                      note="")


def _format_1_run(d: Path) -> Path:
    """A run as mrbench wrote it before results format 2: no delta_kind, no bar."""
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps(dict(
        results_format=1, created="2026-01-01T00:00:00", git_sha="abc", target="bundled",
        workloads=dict(g=dict(workload="gsm8k", entry="g")), an_old_key=1,
        resolved=dict(g=dict(candidate=dict(runner="v2", device="cpu"))))))
    (d / "summary.json").write_text(json.dumps(dict(
        verdict="regression", suite="s", target="bundled", baseline="v1", candidate="v2",
        candidate_faults=[], checks=[FORMAT_1_CHECK], failures=[], metrics={})))
    return d


def test_a_format_1_run_reads_with_its_delta_kind_and_bar_unknown(tmp_path, capsys):
    run = _format_1_run(tmp_path / "old")
    manifest, summary = read_record(run)
    assert manifest.results_format == 1 and manifest.git_sha == "abc"
    assert manifest.an_old_key == 1                      # kept: a manifest is written again
    assert manifest.resolved_side("g", "candidate")["runner"] == "v2"
    [c] = summary.checks
    assert c.delta_kind == DeltaKind.UNKNOWN and c.bar is None
    assert c.verdict is Verdict.REGRESSION and summary.verdict is RunVerdict.REGRESSION
    assert summary.exit_code == 1
    m, s = read_run(run)                                 # the plain-dict view of the same
    assert s["checks"][0]["delta_kind"] == "unknown" and m["an_old_key"] == 1
    assert "**REGRESSION**" in run_markdown(run)
    assert "p99_step_ms" in render_report(run).read_text()


def test_a_newer_format_is_refused_in_one_line(tmp_path, capsys):
    run = _format_1_run(tmp_path / "new")
    m = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps(dict(m, results_format=RESULTS_FORMAT + 1)))
    want = (f"{run}: results format {RESULTS_FORMAT + 1} is newer than this mrbench reads "
            f"({RESULTS_FORMAT}); upgrade mrbench")
    for read in (read_record, read_summary, read_manifest, read_run):
        with pytest.raises(BadInput) as e:
            read(run)
        assert str(e.value) == want
    assert main(["report", "--markdown", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"mrbench: error: {want}"]


def test_a_summary_that_is_not_a_runs_is_one_line(tmp_path):
    run = _format_1_run(tmp_path / "bad")
    (run / "summary.json").write_text(json.dumps(dict(verdict="pass")))
    with pytest.raises(BadInput, match=r"summary.json is not a run's summary \(checks: "):
        read_summary(run)


def test_build_is_the_gates_verdict():
    fail = Check("w", "m", "", None, None, None, None, None, "-", "-", Verdict.ERROR)
    assert RunSummary.build([fail], []).verdict == RunVerdict.ERROR
    s = RunSummary.build([], [dict(workload="w", side="candidate", error="x")], suite="s")
    assert (s.verdict, s.exit_code) == (RunVerdict.ERROR, 3)
    assert "traceback" not in s.to_json_dict()["failures"][0]       # unset: left out
    assert "interrupted" not in s.to_json_dict() and "imported" not in s.to_json_dict()
    assert RunSummary.build([], imported=dict(kind="serve")).verdict == RunVerdict.IMPORTED


# ---- the published schemas ------------------------------------------------------------------

@pytest.mark.parametrize("which", sorted(SCHEMAS))
def test_the_committed_schema_is_the_models(which, capsys):
    """docs/schema/ holds `mrbench schema WHICH`; regenerate it when a model changes:
    `mrbench schema summary > docs/schema/summary.schema.json` (and manifest, faults)."""
    committed = (ROOT / "docs" / "schema" / f"{which}.schema.json").read_text()
    assert committed == schema_text(which), f"docs/schema/{which}.schema.json is stale"
    assert main(["schema", which]) == 0
    assert capsys.readouterr().out == committed
