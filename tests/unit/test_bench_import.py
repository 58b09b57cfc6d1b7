"""`mrbench import-bench`: vllm bench serve/latency JSON -> a run that `mrbench compare` gates
with the harness's statistics and `mrbench report` plots (harness/commands/vllm_bench.py).

Fixtures: tests/fixtures/vllm_bench/, written by make_fixtures.py there in vLLM's schema.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from mrbench.harness.cli import main
from mrbench.harness.commands.vllm_bench import import_bench

FIX = Path(__file__).resolve().parent / "fixtures" / "vllm_bench"
P99 = ("p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms")    # vLLM's names too


def _fixture(name: str) -> dict:
    return json.loads((FIX / f"{name}.json").read_text())


def run_cli(args, capsys):
    code = main([str(a) for a in args])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def _manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def _checks(run: Path) -> dict[str, dict]:
    return {c["metric"]: c for c in _summary(run)["checks"]}


def _assert_report(run: Path, *needles: str) -> str:
    html = (run / "report.html").read_text()
    assert "data:image/png;base64," in html                   # plots, inline
    assert "http://" not in html and "https://" not in html   # nothing fetched
    assert "<script" not in html.lower() and "<link" not in html.lower()
    for n in needles:
        assert n in html, n
    return html


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Imported by `mrbench import-bench` (the command, not the library, writes report.html)."""
    d = tmp_path_factory.mktemp("imports")
    names = ("serve_detailed_base", "serve_detailed_aa", "serve_detailed_slow_ttft",
             "serve_summary_base", "serve_summary_slow_ttft")
    for name in names:
        assert main(["import-bench", str(FIX / f"{name}.json"), "--out", str(d / name)]) == 0
    return {name: d / name for name in names}


def test_fixtures_are_what_the_generator_writes():
    spec = importlib.util.spec_from_file_location("make_fixtures", FIX / "make_fixtures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name, (obj, indent) in mod.fixtures().items():
        assert (FIX / name).read_text() == json.dumps(obj, indent=indent), name


def test_detailed_serve_import_layout(runs):
    run, src = runs["serve_detailed_base"], _fixture("serve_detailed_base")
    m, s = _manifest(run), _summary(run)
    f = m["imported"]["files"][0]
    assert m["target"] == "vllm-bench" and m["imported"]["tool"] == "vllm bench serve"
    assert f["sha256"] == hashlib.sha256((FIX / "serve_detailed_base.json").read_bytes()) \
        .hexdigest()
    assert (f["date"], f["backend"], f["model_id"]) == (src["date"], src["backend"],
                                                        src["model_id"])
    assert f["per_request"] == "full" and f["e2e_source"] == "latencies"
    assert s["verdict"] == "imported" and s["target"] == "vllm-bench"

    req = pd.read_csv(run / "requests.csv")
    assert len(req) == src["num_prompts"] and "wave" not in req.columns
    ok = req[req["error"].isna()]
    assert len(ok) == src["completed"] == src["num_prompts"] - src["failed"]
    assert req.loc[req["error"].notna(), "ttft_ms"].isna().all()
    assert ok["ttft_ms"].tolist() == pytest.approx(
        [t * 1e3 for t, e in zip(src["ttfts"], src["errors"]) if not e])
    i = int(ok.index[0])                        # TPOT: vLLM's (latency - ttft) / (out - 1)
    assert req.loc[i, "tpot_ms"] == pytest.approx(
        (src["latencies"][i] - src["ttfts"][i]) / (src["output_lens"][i] - 1) * 1e3)
    itl = pd.read_csv(run / "itl.csv")
    n_gaps = sum(len(x) for x in src["itls"])
    assert len(itl) == n_gaps and "wave" not in itl.columns

    metrics = s["metrics"]["vllm-bench-serve"]["candidate"]
    for key in ("p99_ttft_ms", "mean_tpot_ms", "p99_e2el_ms", "request_throughput",
                "total_output_tokens", "max_concurrent_requests"):
        assert metrics[key] == pytest.approx(src[key]), key     # vLLM's field names, values
    res = m["resolved"]["vllm-bench-serve"]["candidate"]
    assert res["itl_independent_samples"] == math.ceil(n_gaps / src["max_concurrency"])
    assert {c["verdict"] for c in s["checks"]} == {"info"}
    assert _checks(run)["p99_ttft_ms"]["candidate"] == pytest.approx(src["p99_ttft_ms"])
    _assert_report(run, "imported")


def test_ttft_30pct_slower_is_a_regression(runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    code, stdout, err = run_cli(["compare", runs["serve_detailed_base"],
                                 runs["serve_detailed_slow_ttft"], "--out", out], capsys)
    assert code == 1, stdout + err
    assert "verdict: regression" in stdout
    c = _checks(out)
    assert set(c) == set(P99)                   # vllm bench has no step table: no step check
    ttft = c["p99_ttft_ms"]
    assert ttft["verdict"] == "regression" and ttft["delta"] > 0.25 and ttft["ci"][0] > 0
    assert "pooled" in ttft["method"] and "bootstrap" in ttft["method"]
    for m in ("p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms"):
        assert c[m]["verdict"] == "pass", c[m]
    assert "pooled" in c["p99_itl_ms"]["method"]    # ITL judged: the steps bound is >= 299
    _assert_report(out, "regression")
    code, stdout, _ = run_cli(["report", out], capsys)          # re-render
    assert code == 0 and stdout.strip() == str(out / "report.html")
    _assert_report(out)


def test_same_distribution_other_seed_passes(runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    code, stdout, err = run_cli(["compare", runs["serve_detailed_base"],
                                 runs["serve_detailed_aa"], "--out", out], capsys)
    assert code == 0, stdout + err
    c = _checks(out)
    assert {m: c[m]["verdict"] for m in P99} == {m: "pass" for m in P99}   # judged, all pass
    _assert_report(out, "pass")


def test_aggregates_only_imports_and_compares_as_info(runs, tmp_path, capsys):
    base, cand = runs["serve_summary_base"], runs["serve_summary_slow_ttft"]
    s = _summary(base)
    assert s["imported"]["per_request"] == "none" and s["imported"]["requests"] == 0
    assert any("without --save-detailed" in n for n in s["imported"]["notes"])
    _assert_report(base, "no per-request samples")
    out = tmp_path / "cmp"
    code, stdout, err = run_cli(["compare", base, cand, "--out", out], capsys)
    assert code == 0, stdout + err
    c = _checks(out)
    b, k = _fixture("serve_summary_base"), _fixture("serve_summary_slow_ttft")
    for m in P99:
        assert c[m]["verdict"] == "info" and c[m]["p_value"] is None and c[m]["ci"] is None
        assert c[m]["baseline"] == pytest.approx(b[m])
        assert c[m]["candidate"] == pytest.approx(k[m])
        assert "aggregates only" in c[m]["note"]
    assert c["p99_ttft_ms"]["delta"] > 0.25     # 37 % higher, and still not a verdict
    _assert_report(out, "aggregates only")


def test_newer_layout_without_save_detailed_keeps_e2e(runs, tmp_path, capsys):
    d = _fixture("serve_detailed_base")         # what vLLM deletes without --save-detailed
    for k in ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts",
              "errors"):
        del d[k]
    (tmp_path / "plain.json").write_text(json.dumps(d))
    run = import_bench([tmp_path / "plain.json"], tmp_path / "plain")
    req = pd.read_csv(run / "requests.csv")
    assert len(req) == d["completed"] and req["e2e_ms"].notna().all()
    assert _summary(run)["imported"]["per_request"] == "e2e"
    out = tmp_path / "cmp"
    code, stdout, err = run_cli(["compare", run, runs["serve_detailed_slow_ttft"],
                                 "--out", out], capsys)
    assert code == 0, stdout + err             # TTFT +37 % is reported (info), not judged
    c = _checks(out)
    assert c["p99_ttft_ms"]["verdict"] == "info" and c["p99_ttft_ms"]["delta"] > 0.25
    assert "pooled" in c["p99_e2el_ms"]["method"]  # E2EL has samples on both sides: judged


def test_older_detailed_layout_reconstructs_e2e(tmp_path):
    d = _fixture("serve_detailed_base")         # before vLLM wrote latencies / start_times
    for k in ("latencies", "start_times", "queue_times", "endpoint_type", "label", "failed",
              "max_output_tokens_per_s", "max_concurrent_requests", "rtfx"):
        del d[k]
    (tmp_path / "old.json").write_text(json.dumps(d))
    run = import_bench([tmp_path / "old.json"], tmp_path / "old", label="old-vllm")
    req = pd.read_csv(run / "requests.csv").dropna(subset=["ttft_ms"])
    src = _fixture("serve_detailed_base")
    lat = [x * 1e3 for x, e in zip(src["latencies"], src["errors"]) if not e]
    assert req["e2e_ms"].tolist() == pytest.approx(lat, abs=0.5)   # ttft + sum(itl)
    m = _manifest(run)
    assert m["imported"]["files"][0]["e2e_source"] == "ttfts + sum(itls)"
    assert m["imported"]["files"][0]["concurrency_bound"]["value"] == 16
    assert _summary(run)["candidate"] == "old-vllm"


def test_several_files_pool_into_one_side(tmp_path):
    paths = [FIX / "serve_detailed_base.json", FIX / "serve_detailed_aa.json"]
    run = import_bench(paths, tmp_path / "pooled", side="baseline", label="v0.9")
    req = pd.read_csv(run / "requests.csv")
    assert len(req) == 2000 and req["req_index"].is_unique
    assert set(req["file"]) == {0, 1} and set(req["side"]) == {"baseline"}
    s, m = _summary(run), _manifest(run)
    assert s["baseline"] == "v0.9" and s["candidate"] is None
    metrics = s["metrics"]["vllm-bench-serve"]["baseline"]
    assert metrics["completed"] == 1996
    assert m["resolved"]["vllm-bench-serve"]["baseline"]["itl_independent_samples"] == sum(
        math.ceil(sum(len(x) for x in _fixture(p.stem)["itls"]) / 16) for p in paths)


def test_latency_json_imports_one_row_per_iteration(tmp_path, capsys):
    runs = [import_bench([FIX / f"latency_{n}.json"], tmp_path / n) for n in ("base", "slow")]
    src = _fixture("latency_base")
    req = pd.read_csv(runs[0] / "requests.csv")
    assert req["e2e_ms"].tolist() == pytest.approx([x * 1e3 for x in src["latencies"]])
    metrics = _summary(runs[0])["metrics"]["vllm-bench-latency"]["candidate"]
    assert metrics["avg_latency"] == pytest.approx(src["avg_latency"])
    assert metrics["percentiles.99"] == pytest.approx(src["percentiles"]["99"])
    out = tmp_path / "cmp"
    code, stdout, err = run_cli(["compare", *runs, "--out", out], capsys)
    assert code == 0, stdout + err
    c = _checks(out)
    assert list(c) == ["p99_e2el_ms"]           # the only latency vllm bench latency measures
    assert c["p99_e2el_ms"]["verdict"] == "info" and "299" in c["p99_e2el_ms"]["note"]


def test_cli_prints_the_run_directory(tmp_path, capsys):
    out = tmp_path / "r"
    code, stdout, err = run_cli(["import-bench", FIX / "latency_base.json", "--out", out],
                                capsys)
    assert code == 0 and stdout.strip() == str(out) and err == ""
    code, stdout, _ = run_cli(["import-bench", FIX / "latency_slow.json", "--out",
                               tmp_path / "j", "--json"], capsys)
    assert code == 0 and json.loads(stdout)["run"] == str(tmp_path / "j")


def _bad(tmp_path: Path, name: str, edit) -> Path:
    d = _fixture("serve_detailed_base")
    edit(d)
    p = tmp_path / name
    p.write_text(json.dumps(d))
    return p


def _first_ok() -> int:
    return _fixture("serve_detailed_base")["errors"].index("")


def _negative_ttft(d: dict) -> None:
    d["ttfts"][_first_ok()] = -1.0


def _bad_cases(tmp_path: Path) -> list[tuple[list[Path], str]]:
    (tmp_path / "trunc.json").write_text('{"date": "20250612-141530", "completed": ')
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "other.json").write_text('{"elapsed_time": 1.0, "num_requests": 8}')
    return [
        ([tmp_path / "missing.json"], "no such file"),
        ([tmp_path / "trunc.json"], "not JSON"),
        ([tmp_path / "list.json"], "not a vllm bench result"),
        ([tmp_path / "other.json"], "not a vllm bench serve or latency result"),
        ([_bad(tmp_path, "short.json", lambda d: d["itls"].pop())],
         "per-request lists differ in length"),
        ([_bad(tmp_path, "noerr.json", lambda d: d.pop("errors"))],
         "per-request fields incomplete"),
        ([_bad(tmp_path, "neg.json", _negative_ttft)], f"ttfts[{_first_ok()}] is -1.0"),
        ([_bad(tmp_path, "count.json", lambda d: d.update(completed=1000))],
         "completed = 1000 but 998"),
        ([FIX / "serve_detailed_base.json", FIX / "latency_base.json"], "import them separately"),
        ([FIX / "serve_detailed_base.json", FIX / "serve_detailed_base.json"], "same content"),
        ([FIX / "serve_detailed_base.json",
          _bad(tmp_path, "conc.json", lambda d: d.update(max_concurrency=64))],
         "pool only runs of one setup"),
        ([FIX / "serve_detailed_aa.json", FIX / "serve_summary_base.json"],
         "per-request data: none, but"),
    ]


def test_bad_files_exit_2_with_one_line_and_write_nothing(tmp_path, capsys):
    for i, (paths, needle) in enumerate(_bad_cases(tmp_path)):
        out = tmp_path / "results" / f"run{i}"
        code, stdout, err = run_cli(["import-bench", *paths, "--out", out], capsys)
        lines = [x for x in err.splitlines() if x]
        assert code == 2, (needle, stdout, err)
        assert len(lines) == 1 and lines[0].startswith("mrbench: error: "), err
        assert needle in lines[0] and paths[-1].name in lines[0], lines[0]
        assert "Traceback" not in err and stdout == ""
        assert not (tmp_path / "results").exists()          # nothing written, not even tmp
