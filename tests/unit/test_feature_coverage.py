"""Feature coverage from a run's record (record/feature_coverage.py), and the table the
reports show (show/coverage.py): hand-made manifests and summaries, each feature asked for
and exercised, asked for and not exercised, exercised on one side only, not recorded (an
older run), and not run here."""
import json
from pathlib import Path

from test_report import assert_self_contained, make_run_dir, scan
from test_report_browser import _chromium, assert_reads_at_a_glance, open_in_chromium

from mrbench.harness.checks.feature_coverage import Coverage, run_coverage, sampling_kinds
from mrbench.harness.record.run_record import Manifest, RunSummary
from mrbench.harness.show import coverage
from mrbench.harness.show.markdown import run_markdown
from mrbench.harness.show.report import render_report

BOTH = ("baseline", "candidate")


def _engine(**kw) -> dict:
    return dict(attention_backend="FLASH_ATTN", cudagraph_mode="NONE",
                engine={**dict(num_speculative_tokens=0, speculative_method=None,
                               pd_disagg=False), **kw})


def _record(workloads: dict[str, dict], unsupported: list[dict] = (),
            suite_engine_args: dict[str, dict] | None = None) -> tuple[Manifest, RunSummary]:
    """A run of `workloads`: {id: {kind, params, figures: {side: {...}}, resolved: {side:
    {...}}, checks: [...]}}; a side without figures did not run."""
    suite = dict(name="s", workloads=[
        dict(id=w, workload=spec.get("kind", "gsm8k"),
             engine_args=(suite_engine_args or {}).get(w, {})) for w, spec in workloads.items()])
    manifest = Manifest(
        suite=suite, sides={s: dict(target="vllm", runner="v1") for s in BOTH},
        workloads={w: dict(workload=spec.get("kind", "gsm8k"), entry=w,
                           params=spec.get("params", {})) for w, spec in workloads.items()},
        resolved={w: spec.get("resolved", {}) for w, spec in workloads.items()})
    summary = RunSummary.build(
        [c for spec in workloads.values() for c in spec.get("checks", [])],
        metrics={w: spec.get("figures", {}) for w, spec in workloads.items()},
        unsupported=list(unsupported))
    return manifest, summary


def _cells(manifest: Manifest, summary: RunSummary) -> dict[str, dict]:
    return {r.workload: r.cells for r in run_coverage(manifest, summary)}


def _both(**figures) -> dict[str, dict]:
    return {s: dict(figures) for s in BOTH}


def test_a_feature_asked_for_shows_whether_it_happened_on_both_sides():
    m, s = _record({
        "chunked": dict(params=dict(min_prefill_chunks=3),
                        figures=_both(completed=8, prefill_prompts_3plus_chunks=8,
                                      prefill_middle_chunks=31)),
        "chunked-none": dict(params=dict(min_prefill_chunks=3),
                             figures=_both(completed=8, prefill_prompts_3plus_chunks=0,
                                           prefill_middle_chunks=0)),
        "preempt": dict(kind="preemption",
                        figures=dict(baseline=dict(num_preemptions=0),
                                     candidate=dict(num_preemptions=5))),
        "preempt-none": dict(kind="preemption", figures=_both(num_preemptions=0)),
        "prefix": dict(kind="prefix-cache",
                       figures=_both(prefix_cache_hits=640, prefix_cache_queries=1024,
                                     prefix_cache_hit_rate=0.625)),
    })
    cells = _cells(m, s)
    assert cells["chunked"]["chunked prefill"].status == Coverage.EXERCISED
    assert cells["chunked"]["chunked prefill"].detail == (
        "prompts in >= 3 chunks 8 / 8, middle chunks 31 / 31 (baseline / candidate)")
    # asked and not exercised: never shown as covered
    none = cells["chunked-none"]["chunked prefill"]
    assert none.status == Coverage.MISSED and none.asked and not none.covered
    # one side preempted, the other never: the comparison does not cover preemption
    assert cells["preempt"]["preemption"].status == Coverage.ONE_SIDE
    assert cells["preempt"]["preemption"].detail == "preemptions 0 / 5 (baseline / candidate)"
    assert cells["preempt-none"]["preemption"].status == Coverage.MISSED
    hits = cells["prefix"]["prefix cache"]
    assert hits.covered and "hit rate 0.625 / 0.625" in hits.detail


def test_a_kv_cache_workload_asks_through_its_sides_record():
    """The preemption and prefix-cache workloads mark what they asked for in each side's
    record (what the kv_cache checks key on), whatever the entry is called."""
    mark = dict(preemption=dict(num_kv_blocks=12, block_size=16),
                prefix_cache=dict(shared_prefix_tokens=256))
    m, s = _record({"kv": dict(resolved={x: mark for x in BOTH},
                               figures=_both(num_preemptions=0, prefix_cache_hits=0))})
    cells = _cells(m, s)["kv"]
    assert cells["preemption"].status == Coverage.MISSED and cells["preemption"].asked
    assert cells["prefix cache"].status == Coverage.MISSED


def test_a_counter_an_older_run_lacks_is_not_recorded_never_zero():
    m, s = _record({
        # a preemption entry read from a run (or a target) that counts no preemptions
        "preempt": dict(kind="preemption", figures=_both(completed=8)),
        # one side counted, the other did not
        "chunked": dict(params=dict(min_prefill_chunks=3),
                        figures=dict(baseline=dict(prefill_prompts_3plus_chunks=4),
                                     candidate=dict(completed=4))),
        # nothing asked and nothing counted: the feature is left out, not "not recorded"
        "plain": dict(figures=_both(completed=8)),
    })
    cells = _cells(m, s)
    assert cells["preempt"]["preemption"].status == Coverage.NOT_RECORDED
    assert "recorded no num_preemptions" in cells["preempt"]["preemption"].detail
    assert cells["chunked"]["chunked prefill"].status == Coverage.NOT_RECORDED
    assert "the candidate recorded no prefill_prompts_3plus_chunks" in \
        cells["chunked"]["chunked prefill"].detail
    assert "preemption" not in cells["plain"] and "chunked prefill" not in cells["plain"]


def test_a_feature_nobody_asked_for_that_happened_is_exercised():
    m, s = _record({"gsm8k": dict(figures=_both(completed=8, num_preemptions=2))})
    cell = _cells(m, s)["gsm8k"]["preemption"]
    assert cell.covered and not cell.asked


def test_sampling_kinds_from_the_parameters():
    assert sampling_kinds(dict(temperature=0.8, top_p=0.95, top_k=40)) == \
        ["temperature", "top-k", "top-p"]
    assert sampling_kinds(dict(temperature=0.0)) == []                 # greedy
    # a dump leaves fields at their defaults out: absent is off
    assert sampling_kinds(dict(temperature=2.0, min_p=0.1)) == ["temperature", "min-p"]
    assert sampling_kinds(dict(temperature=2.0, repetition_penalty=1.3,
                               presence_penalty=0.8)) == ["temperature", "penalties"]
    assert sampling_kinds(dict(temperature=2.0, logit_bias={"3": -4.0})) == \
        ["temperature", "logit bias"]
    assert sampling_kinds(dict(temperature=2.0, top_k=64, unseeded_every=2)) == \
        ["temperature", "top-k", "seeds mixed"]


def test_a_sampling_set_is_exercised_where_both_sides_completed_requests():
    m, s = _record({
        "sampled.min-p": dict(kind="sampled", params=dict(set="min-p", temperature=2.0,
                                                          min_p=0.1),
                              figures=_both(completed=16)),
        "sampled.greedy": dict(kind="sampled", params=dict(set="greedy", temperature=0.0),
                               figures=dict(baseline=dict(completed=16),
                                            candidate=dict(completed=0))),
    })
    cells = _cells(m, s)
    assert cells["sampled.min-p"]["sampling"].covered
    assert cells["sampled.min-p"]["sampling"].detail.startswith("set min-p: temperature, min-p")
    assert cells["sampled.greedy"]["sampling"].status == Coverage.ONE_SIDE
    assert "greedy" in cells["sampled.greedy"]["sampling"].detail


def test_the_attention_backend_asked_for_against_the_one_built():
    m, s = _record({
        "g@FLASHINFER": dict(resolved={x: _engine() for x in BOTH},
                             figures=_both(completed=4)),
        "g@FLASH_ATTN": dict(resolved={x: _engine() for x in BOTH},
                             figures=_both(completed=4)),
        "g": dict(resolved=dict(baseline=_engine(), candidate=dict(
            _engine(), attention_backend="TRITON_ATTN")), figures=_both(completed=4)),
        "old": dict(resolved={x: {"engine": {}} for x in BOTH}, figures=_both(completed=4)),
    }, suite_engine_args={"g@FLASHINFER": dict(attention_backend="FLASHINFER"),
                          "g@FLASH_ATTN": dict(attention_backend="flash_attn")})
    cells = _cells(m, s)
    asked = cells["g@FLASHINFER"]["attention backend"]
    assert asked.status == Coverage.MISSED and asked.detail == "asked FLASHINFER, ran FLASH_ATTN"
    assert cells["g@FLASH_ATTN"]["attention backend"].covered
    assert cells["g"]["attention backend"].detail == "baseline FLASH_ATTN; candidate TRITON_ATTN"
    assert cells["old"]["attention backend"].status == Coverage.NOT_RECORDED


def test_spec_decode_pd_warmup_and_graphs():
    spec = _engine(num_speculative_tokens=2, speculative_method="eagle")
    pd = dict(_engine(pd_disagg=True), pd=dict(connector="MrbenchExampleConnector (a ...)"))
    warm = dict(workload="w", metric="unwarmed_dispatch", baseline=0.0, candidate=1.0,
                verdict="regression", note="never warmed: mixed; serving classes: mixed, "
                                           "uniform_decode(q=2)")
    m, s = _record({
        "spec": dict(kind="spec-decode", params=dict(k=2, proposer="eagle"),
                     resolved={x: dict(spec, cudagraph_mode="FULL_AND_PIECEWISE")
                               for x in BOTH},
                     figures=_both(spec_decode_num_drafts=100,
                                   spec_decode_acceptance_length=2.5)),
        "spec-none": dict(kind="spec-decode", params=dict(k=2),
                          resolved={x: spec for x in BOTH},
                          figures=_both(spec_decode_num_drafts=0)),
        "pd": dict(params=dict(mode="pd"), resolved={x: pd for x in BOTH},
                   figures=_both(pd_requests=64)),
        "pd-bundled": dict(params=dict(mode="pd"), figures=_both(completed=8,
                                                                 mean_kv_handoff_ms=1.5)),
        "w": dict(kind="warmup", checks=[warm], figures=_both(completed=4)),
        "w-cpu": dict(kind="warmup", figures=_both(completed=4)),
    })
    cells = _cells(m, s)
    assert cells["spec"]["spec decode"].detail == (
        "eagle k=2: drafts 100 / 100, acceptance length 2.5 / 2.5 (baseline / candidate)")
    assert cells["spec"]["CUDA graphs / async"].covered
    assert "CUDA graphs / async" not in cells["spec-none"]            # NONE: left out
    assert cells["spec-none"]["spec decode"].status == Coverage.MISSED
    assert cells["pd"]["PD"].detail == (
        "MrbenchExampleConnector: requests handed over 64 / 64 (baseline / candidate)")
    assert cells["pd-bundled"]["PD"].covered
    # warmup coverage is the check's: there where the dispatch was logged, whatever its
    # verdict (the check judges it); a warmup entry without it is not recorded
    assert cells["w"]["warmup coverage"].covered
    assert "served mixed, uniform_decode(q=2)" in cells["w"]["warmup coverage"].detail
    assert cells["w-cpu"]["warmup coverage"].status == Coverage.NOT_RECORDED


def test_cuda_graphs_and_async_scheduling_where_the_engines_recorded_them():
    graphs = dict(_engine(async_scheduling=True), cudagraph_mode="FULL_AND_PIECEWISE")
    m, s = _record({
        "both": dict(resolved={x: graphs for x in BOTH}, figures=_both(completed=4)),
        "v2-only": dict(resolved=dict(baseline=_engine(), candidate=graphs),
                        figures=_both(completed=4)),
        # a run from before async scheduling was recorded
        "old": dict(resolved={x: dict(_engine(), cudagraph_mode="FULL") for x in BOTH},
                    figures=_both(completed=4)),
    })
    cells = _cells(m, s)
    assert cells["both"]["CUDA graphs / async"].detail == (
        "CUDA graphs FULL_AND_PIECEWISE / FULL_AND_PIECEWISE, async scheduling on / on "
        "(baseline / candidate)")
    assert cells["v2-only"]["CUDA graphs / async"].status == Coverage.ONE_SIDE
    assert "async scheduling not recorded / not recorded" in \
        cells["old"]["CUDA graphs / async"].detail


def test_logprobs_are_exercised_where_the_check_compared_positions():
    def check(w: str, note: str, verdict: str = "pass") -> dict:
        return dict(workload=w, metric="logprobs_agreement", candidate=0.0,
                    verdict=verdict, note=note)
    m, s = _record({
        "logprobs.processed": dict(
            kind="logprobs", params=dict(mode="processed", top_n=5), figures=_both(),
            checks=[check("logprobs.processed", "416 positions compared (416 with the same "
                                                "generated token); mismatches: 0 logprob")]),
        "logprobs.raw": dict(
            kind="logprobs", params=dict(mode="raw", top_n=5), figures=_both(),
            checks=[check("logprobs.raw", "not measured: the candidate returned no logprobs",
                          "info")]),
        "logprobs.old": dict(kind="logprobs", params=dict(mode="raw", top_n=5),
                             figures=_both()),
    })
    cells = _cells(m, s)
    assert cells["logprobs.processed"]["logprobs"].detail == (
        "top-5 processed_logprobs: 416 positions compared (416 with the same generated token)")
    assert cells["logprobs.processed"]["logprobs"].covered
    assert cells["logprobs.raw"]["logprobs"].status == Coverage.MISSED
    assert "returned no logprobs" in cells["logprobs.raw"]["logprobs"].detail
    assert cells["logprobs.old"]["logprobs"].status == Coverage.NOT_RECORDED


def test_a_workload_not_run_here_shows_why_and_what_it_asked_for():
    m, s = _record({"g@FLASHINFER": dict()}, unsupported=[
        dict(workload="g@FLASHINFER", side=x, target="vllm",
             reason="vLLM 0.26.0's FLASHINFER cannot run here: ModuleNotFoundError: No "
                    "module named 'flashinfer' (unsupported here)") for x in BOTH],
        suite_engine_args={"g@FLASHINFER": dict(attention_backend="FLASHINFER")})
    row = run_coverage(m, s)[0]
    assert row.unsupported == ("vLLM 0.26.0's FLASHINFER cannot run here: "
                               "ModuleNotFoundError: No module named 'flashinfer'")
    assert row.cells["attention backend"].status == Coverage.UNSUPPORTED


# ---- the reports -------------------------------------------------------------------------

def _covered_run(d: Path) -> Path:
    """test_report's synthetic run with coverage to show: gsm8k chunked on both sides,
    mooncake asked to preempt and never did."""
    run = make_run_dir(d)
    manifest = dict(results_format=4, git_sha="abc123", workloads={
        "gsm8k": dict(workload="gsm8k", entry="gsm8k", params=dict(min_prefill_chunks=3)),
        "mooncake": dict(workload="preemption", entry="mooncake", params={})})
    (run / "manifest.json").write_text(json.dumps(manifest))
    summary = json.loads((run / "summary.json").read_text())
    summary["metrics"] = {"gsm8k": _both(prefill_prompts_3plus_chunks=8,
                                         prefill_middle_chunks=30),
                          "mooncake": _both(num_preemptions=0)}
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def test_the_report_folds_the_coverage_after_what_needs_attention(tmp_path):
    html, scanned = scan(render_report(_covered_run(tmp_path / "run")))
    assert_self_contained(html, scanned)
    ids = [a.get("id") for _, a in scanned.events if a.get("id")]
    assert ids.index("attention") < ids.index("coverage") < ids.index("details")
    folded = next(a for t, a in scanned.events if a.get("id") == "coverage")
    assert "open" not in folded                                      # folded by default
    # its own line says what was asked for and not exercised, without unfolding
    assert "1 asked, not exercised (mooncake: preemption)" in html
    assert 'class="cov-asked-not-exercised"' in html and 'class="cov-exercised"' in html
    md = run_markdown(tmp_path / "run")
    assert "| gsm8k | chunked prefill | - |" in md
    assert "| mooncake | - | preemption: asked, not exercised (preemptions 0 / 0 " in md


def test_a_run_with_nothing_to_cover_shows_no_table(tmp_path):
    html, _ = scan(render_report(make_run_dir(tmp_path / "run")))
    assert 'id="coverage"' not in html


def test_a_campaign_shows_its_clean_runs_coverage(tmp_path):
    camp = tmp_path / "camp"
    _covered_run(camp / "clean")
    got = coverage.run_dir_context(camp / "clean")
    assert got is not None and got["columns"] == ["chunked prefill", "preemption"]
    assert coverage.run_dir_context(camp / "nothing") is None


def test_the_first_screen_is_unchanged_with_coverage_in_chromium(tmp_path):
    _chromium()
    seen = open_in_chromium(render_report(_covered_run(tmp_path / "run")), tmp_path)
    assert_reads_at_a_glance(seen)
