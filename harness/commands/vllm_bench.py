"""`mrbench import-bench`: `vllm bench serve` / `vllm bench latency` result JSON -> a results
directory that `mrbench compare`, `mrbench report` and `mrbench history` read like any run.

What is read is vLLM's own schema (vllm/benchmarks/serve.py, vllm/benchmarks/latency.py),
and its names are kept: mrbench's own run reports every figure it shares with vLLM under
vLLM's name (record/metrics.py), so the summary's figures and the checks' metrics
(p99_ttft_ms, p99_tpot_ms, p99_itl_ms, p99_e2el_ms) are the file's keys as they stand.

* serve (`--save-result`): date, backend / endpoint_type, label, model_id, tokenizer_id,
  num_prompts, request_rate ("inf" when unlimited), burstiness, max_concurrency, duration,
  completed, failed, total_input_tokens, total_output_tokens, request_throughput,
  output_throughput, total_token_throughput, max_concurrent_requests, and
  mean_/median_/std_/pNN_ X _ms for X in ttft, tpot, itl, e2el. With `--save-detailed`, per
  request: input_lens, output_lens, ttfts (s), itls (s, one list per request), errors ("" =
  success), generated_texts, and in newer vLLM latencies (s) and start_times. Rows follow
  vLLM's definitions: TTFT = ttfts, E2E = latencies (older files: ttft + sum(itl), the
  reconstruction vLLM's own timeline plot uses), TPOT = (E2E - TTFT) / (output_len - 1) for
  output_len > 1, ITL = every gap. A failed request stays a row, with its error and no
  latency. Newer vLLM keeps `latencies` even without --save-detailed: E2E alone is then
  imported (when the failed requests' zero entries can be told apart).
* latency (`--output-json`): avg_latency, std_latency, latencies (s, one per batch
  iteration), percentiles {"10", ..., "99"}. An iteration is one row with e2e_ms: its batch
  arrives at once and stops at --output-len, so the iteration, not the request, is a sample.
  Its P99 is checked as p99_e2el_ms; the summary keeps avg_latency, std_latency and
  percentiles.NN as vLLM names them.

Statistics: what `mrbench compare IMPORT_A IMPORT_B` does with imported runs.

* No `wave` column is written. compare's blocked test pairs wave k of the baseline with
  wave k of the candidate because the harness ran them back to back in ABBA order; two
  vllm bench runs were not interleaved, so pairing file k with file k (or cutting a file
  into waves) would claim a design that did not happen. Imports therefore always take
  compare's pooled path: the relative change of the P99 by unpaired bootstrap (p-value:
  Mann-Whitney U), judged only with >= 299 independent samples per side (the fewest for
  an order-statistic 90 % CI of a P99), else reported as info. Several files of one side
  are pooled (the `file` column says which); their run-to-run spread is not modelled.
* ITL: the harness counts at most one independent ITL sample per engine step, since the
  requests of one batch step get their tokens together. An import has no step table, so
  it records a lower bound on the number of steps the gaps came from: gaps divided by the
  most requests that can have been in flight at once (the smaller of max_concurrency and
  vLLM's max_concurrent_requests, else the peak from start_times + latencies, else every
  request of the file). compare uses it where a native run uses len(steps).
* Without per-request data (serve without --save-detailed) vLLM's own P99s are recorded
  (resolved[...]["reported"]); compare shows them as `info`, never as a verdict: no
  samples, no test. The import's own report says so in its notes.
* A verdict on two imports says the candidate's run was slower than the baseline's beyond
  the sampling noise within the runs. Separate runs also differ by machine state and time,
  which the harness's ABBA waves cancel and nothing here can; an A/A pair of imports from
  the same setup shows how large that is.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mrbench.contract import BadInput, SideResult

from ..checks import stats
from ..checks.latency import latency_summary
from ..record.metrics import LATENCY, PERCENTILES, SPEC_POSITIONS
from ..record.results import RunWriter, check_out, environment
from ..record.run_record import NOT_GATED, Check, DeltaKind, Manifest, RunSummary, Verdict

TARGET = "vllm-bench"
WORKLOADS = {"serve": "vllm-bench-serve", "latency": "vllm-bench-latency"}
DETAILED = ("input_lens", "output_lens", "ttfts", "itls", "errors")
SETUP = ("date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id",
         "num_prompts", "request_rate", "burstiness", "max_concurrency")
SAME_SETUP = ("model_id", "request_rate", "burstiness", "max_concurrency")   # to pool files
# the P99s vllm bench measures, which compare gates (no step table: no step metric)
MEASURED = {"serve": ("p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms"),
            "latency": ("p99_e2el_ms",)}


@dataclass
class _File:
    path: Path
    sha256: str
    size: int
    kind: str
    data: dict[str, Any]
    requests: list[dict] = field(default_factory=list)
    itl: list[dict] = field(default_factory=list)
    per_request: str = "none"             # full | e2e | none
    e2e_source: str | None = None
    itl_steps: int | None = None          # lower bound on the engine steps behind the ITLs
    concurrency_bound: tuple[int, str] | None = None
    reported: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _fail(path: Path, msg: str) -> None:
    raise BadInput(f"{path}: {msg}")


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _seconds(path: Path, where: str, v: Any) -> float:
    if not _is_num(v) or not math.isfinite(v) or v < 0:
        _fail(path, f"{where} is {v!r}, not a time in seconds (a finite number >= 0)")
    return float(v)


def _load(path: Path) -> tuple[dict, str, int]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        _fail(path, "no such file")
    except IsADirectoryError:
        _fail(path, "is a directory, not a vllm bench JSON file")
    except OSError as e:
        _fail(path, f"cannot be read ({e.strerror})")
    try:
        data = json.loads(raw)
    except UnicodeDecodeError:
        _fail(path, "not JSON (not UTF-8 text)")
    except json.JSONDecodeError as e:
        _fail(path, f"not JSON ({e.msg} at line {e.lineno} column {e.colno})")
    if not isinstance(data, dict):
        _fail(path, f"not a vllm bench result (the top level is a JSON "
                    f"{type(data).__name__}, not an object)")
    return data, hashlib.sha256(raw).hexdigest(), len(raw)


def _kind(path: Path, d: dict) -> str:
    if "avg_latency" in d and "latencies" in d and "completed" not in d:
        return "latency"
    if "completed" in d and "duration" in d:
        return "serve"
    _fail(path, "not a vllm bench serve or latency result (no completed + duration, "
                "nor avg_latency + latencies)")
    return ""


def _peak_concurrency(starts: list, lats: list, ok: list[bool]) -> int:
    """vLLM's own sweep over [start, start + latency) of the successful requests."""
    ev = sorted([(float(s), 1) for s, good in zip(starts, ok) if good]
                + [(float(s) + float(x), -1) for s, x, good in zip(starts, lats, ok) if good])
    cur = peak = 0
    for _, step in ev:
        cur += step
        peak = max(peak, cur)
    return peak


def _serve(f: _File, k: int, offset: int) -> None:
    d, path = f.data, f.path
    for key in ("completed", "duration"):
        if not _is_num(d[key]):
            _fail(path, f"{key} is {d[key]!r}, not a number")
    # ttfts / itls mark --save-detailed (a pooling benchmark has input_lens and errors only)
    present = [x for x in DETAILED if x in d] if "ttfts" in d or "itls" in d else []
    if present and len(present) < len(DETAILED):
        missing = [x for x in DETAILED if x not in d]
        _fail(path, f"per-request fields incomplete: has {', '.join(present)} but not "
                    f"{', '.join(missing)} (vllm bench serve --save-detailed writes them together)")
    for key in MEASURED["serve"]:
        if d.get(key) is not None and not _is_num(d[key]):
            _fail(path, f"{key} is {d[key]!r}, not a number")
    f.reported = {m: float(d[m]) for m in MEASURED["serve"]
                  if _is_num(d.get(m)) and math.isfinite(d[m])}
    if present:
        _serve_detailed(f, k, offset)
    elif isinstance(d.get("latencies"), list):
        _serve_e2e_only(f, k, offset)
    else:
        f.notes.append("no per-request data (vllm bench serve without --save-detailed): "
                       "only vLLM's aggregates; a compare reports them, it cannot test them")


def _serve_detailed(f: _File, k: int, offset: int) -> None:
    d, path = f.data, f.path
    names = list(DETAILED) + [x for x in ("latencies", "start_times") if x in d]
    for name in names:
        if not isinstance(d[name], list):
            _fail(path, f"{name} is a JSON {type(d[name]).__name__}, not a list")
    lens = {name: len(d[name]) for name in names}
    if len(set(lens.values())) > 1:
        _fail(path, "per-request lists differ in length: "
                    + ", ".join(f"{n} {v}" for n, v in lens.items()))
    n = lens["ttfts"]
    if n == 0:
        _fail(path, "per-request lists are empty")
    has_lat = "latencies" in d
    ok_flags = []
    for i in range(n):
        err, in_len, out_len = d["errors"][i], d["input_lens"][i], d["output_lens"][i]
        if err is not None and not isinstance(err, str):
            _fail(path, f"errors[{i}] is {err!r}, not a string")
        for name, v in (("input_lens", in_len), ("output_lens", out_len)):
            if not _is_count(v):
                _fail(path, f"{name}[{i}] is {v!r}, not a token count")
        row: dict[str, Any] = dict(req_index=offset + i, file=k, prompt_tokens=in_len,
                                   output_tokens=out_len, ttft_ms=None, tpot_ms=None,
                                   e2e_ms=None, error=None)
        ok_flags.append(not err)
        if err:
            row["error"] = err.strip().splitlines()[-1][:200] if err.strip() else err
            f.requests.append(row)
            continue
        ttft = _seconds(path, f"ttfts[{i}]", d["ttfts"][i])
        gaps = d["itls"][i]
        if not isinstance(gaps, list):
            _fail(path, f"itls[{i}] is {gaps!r}, not a list of inter-token times")
        gaps = [_seconds(path, f"itls[{i}][{j}]", g) for j, g in enumerate(gaps)]
        e2e = _seconds(path, f"latencies[{i}]", d["latencies"][i]) if has_lat \
            else ttft + sum(gaps)
        row.update(ttft_ms=ttft * 1e3, e2e_ms=e2e * 1e3,
                   tpot_ms=(e2e - ttft) / (out_len - 1) * 1e3 if out_len > 1 else None)
        f.requests.append(row)
        f.itl += [dict(req_index=offset + i, file=k, token_index=j + 1, itl_ms=g * 1e3)
                  for j, g in enumerate(gaps)]
    n_ok = sum(ok_flags)
    if _is_num(d["completed"]) and d["completed"] != n_ok:
        _fail(path, f"completed = {d['completed']} but {n_ok} of {n} requests have no error")
    f.per_request = "full"
    f.e2e_source = "latencies" if has_lat else "ttfts + sum(itls)"
    bounds = [(int(d[x]), x) for x in ("max_concurrency", "max_concurrent_requests")
              if _is_count(d.get(x)) and d[x] > 0]
    if not bounds and has_lat and "start_times" in d:
        for i, t in enumerate(d["start_times"]):
            if not _is_num(t) or not math.isfinite(t):
                _fail(path, f"start_times[{i}] is {t!r}, not a time in seconds")
        peak = _peak_concurrency(d["start_times"], d["latencies"], ok_flags)
        bounds = [(peak, "peak of start_times + latencies")] if peak > 0 else []
    f.concurrency_bound = min(bounds) if bounds else (n, "every request of the file")
    f.itl_steps = math.ceil(len(f.itl) / f.concurrency_bound[0]) if f.itl else 0


def _serve_e2e_only(f: _File, k: int, offset: int) -> None:
    d, path = f.data, f.path
    vals = [_seconds(path, f"latencies[{i}]", x) for i, x in enumerate(d["latencies"])]
    completed, failed, errors = d.get("completed"), d.get("failed"), d.get("errors")
    if isinstance(errors, list) and len(errors) == len(vals):     # pooling benchmarks
        kept = [(i, x) for i, (x, e) in enumerate(zip(vals, errors)) if not e]
        known = len(kept) == completed
    else:                                        # a failed request's latency stays 0.0
        kept = [(i, x) for i, x in enumerate(vals) if x > 0]
        known = _is_count(failed) and len(vals) == completed + failed \
            and len(kept) == completed
    if not known:
        f.notes.append("per-request latencies not imported: the failed requests' entries "
                       "cannot be told apart; only vLLM's aggregates")
        return
    f.requests = [dict(req_index=offset + i, file=k, e2e_ms=x * 1e3) for i, x in kept]
    f.per_request, f.e2e_source = "e2e", "latencies"
    f.notes.append("per-request E2E only (latencies without ttfts/itls: vllm bench serve "
                   "without --save-detailed, or a pooling backend): TTFT, TPOT and ITL are "
                   "vLLM's aggregates where it has them, reported, not tested")


def _latency(f: _File, k: int, offset: int) -> None:
    d, path = f.data, f.path
    lat = d["latencies"]
    if not isinstance(lat, list) or not lat:
        _fail(path, "latencies is not a non-empty list of seconds")
    vals = [_seconds(path, f"latencies[{i}]", x) for i, x in enumerate(lat)]
    pct = d.get("percentiles", {})
    if not isinstance(pct, dict) or any(not _is_num(v) for v in pct.values()):
        _fail(path, "percentiles is not an object of numbers ({\"10\": s, ..., \"99\": s})")
    f.requests = [dict(req_index=offset + i, file=k, e2e_ms=x * 1e3)
                  for i, x in enumerate(vals)]
    f.per_request, f.e2e_source = "full", "latencies (one per batch iteration)"
    if _is_num(pct.get("99")):
        f.reported = {"p99_e2el_ms": float(pct["99"]) * 1e3}
    f.notes.append("vllm bench latency: one row per batch iteration (e2e_ms); TTFT, TPOT "
                   "and ITL are not measured by it")


def _parse(paths: Sequence[Path]) -> list[_File]:
    files: list[_File] = []
    offset = 0
    for k, p in enumerate(paths):
        p = Path(p)
        data, sha, size = _load(p)
        f = _File(p, sha, size, _kind(p, data), data)
        if files:
            first = files[0]
            if f.kind != first.kind:
                _fail(p, f"a vllm bench {f.kind} result, but {first.path} is a {first.kind} "
                         "result; import them separately")
            same = next((g for g in files if g.sha256 == sha), None)
            if same is not None:
                _fail(p, f"same content as {same.path} (imported twice?)")
            for key in SAME_SETUP:
                if data.get(key) != first.data.get(key):
                    _fail(p, f"{key} = {data.get(key)!r} differs from {first.path}'s "
                             f"{first.data.get(key)!r}; pool only runs of one setup")
        (_serve if f.kind == "serve" else _latency)(f, k, offset)
        if files and f.per_request != files[0].per_request:
            _fail(p, f"per-request data: {f.per_request}, but {files[0].path} has "
                     f"{files[0].per_request}; a pool of both would be only part of the runs")
        offset += len(f.requests)
        files.append(f)
    return files


def _file_figures(files: list[_File]) -> dict[str, Any]:
    """The files' own figures, which the summary keeps over what mrbench computes from the
    rows (vLLM's exact values, and the counts of requests the rows lack). One file: its
    numbers as they stand, and its per-position acceptance rates (a list). Several: vllm
    bench latency's statistics recomputed from the pooled iterations; serve's counts
    summed and its throughputs over the summed duration (the latency statistics are
    latency_summary's, of the pooled rows)."""
    if len(files) == 1:
        out = {}
        for key, v in files[0].data.items():
            if _is_num(v):
                out[key] = float(v)
            elif key == "percentiles" and isinstance(v, dict):
                out.update({f"percentiles.{p}": float(x) for p, x in v.items() if _is_num(x)})
            elif key == SPEC_POSITIONS and isinstance(v, list) and all(map(_is_num, v)):
                out[key] = [float(x) for x in v]
        return out
    if files[0].kind == "latency":
        lat = np.array([r["e2e_ms"] for f in files for r in f.requests]) / 1e3
        return dict(avg_latency=float(lat.mean()), std_latency=float(lat.std()),
                    **{f"percentiles.{p}": float(np.percentile(lat, p))
                       for p in (10, 25, 50, 75, 90, 99)})
    out: dict[str, float] = {}
    for key in ("duration", "completed", "failed", "total_input_tokens",
                "total_output_tokens"):
        vals = [f.data.get(key) for f in files]
        if all(_is_num(v) for v in vals):
            out[key] = float(sum(vals))
    if out.get("duration"):
        dur = out["duration"]
        for name, num in (("request_throughput", out.get("completed")),
                          ("output_throughput", out.get("total_output_tokens"))):
            if num is not None:
                out[name] = num / dur
        if "total_input_tokens" in out and "total_output_tokens" in out:
            out["total_token_throughput"] = (out["total_input_tokens"]
                                             + out["total_output_tokens"]) / dur
    return out


def import_bench(json_paths: Sequence[Path], out_dir: Path, side: str = "candidate",
                 label: str | None = None) -> Path:
    """Write one results directory from vllm bench JSON files (one setup, pooled); returns
    its path. Bad input raises BadInput naming the file, before anything is written."""

    if side not in ("baseline", "candidate"):
        raise BadInput(f"side must be baseline or candidate, got {side!r}")
    if not json_paths:
        raise BadInput("no vllm bench JSON file given")
    out_dir = Path(out_dir)
    check_out(out_dir)
    files = _parse([Path(p) for p in json_paths])
    kind, first = files[0].kind, files[0]
    wl = WORKLOADS[kind]
    label = str(label or first.data.get("label") or first.path.stem)
    res = SideResult(requests=[r for f in files for r in f.requests],
                     itl=[r for f in files for r in f.itl])
    if kind == "serve" and all(_is_num(f.data.get("duration")) for f in files):
        res.wall_s = float(sum(f.data["duration"] for f in files))
    itl_steps = sum(f.itl_steps or 0 for f in files)
    per_request = sorted({f.per_request for f in files})
    reported = first.reported if len(files) == 1 else {}
    notes = list(dict.fromkeys(n for f in files for n in f.notes))
    if len(files) > 1 and not all(f.per_request == "full" for f in files):
        notes.append("several files without full per-request data: vLLM's P99s cannot be "
                     "pooled, none is reported")
    res.resolved = dict(runner=label, target=TARGET, device=None,
                        model=first.data.get("model_id"), kind=kind,
                        per_request="+".join(per_request), reported=reported,
                        itl_independent_samples=itl_steps if res.itl else None,
                        itl_independent_basis="ITL gaps / max requests in flight, per file "
                        "(a lower bound on the engine steps; harness/commands/vllm_bench.py)")
    checks = []
    for metric in MEASURED[kind]:
        m = LATENCY[metric]
        x = np.array([r[m.column] for r in getattr(res, m.table)
                      if r.get(m.column) is not None])
        if len(x):
            value = stats.percentile(x, 99)
            method = f"P99 of the imported per-request samples (n = {len(x)})"
        elif metric in reported:
            value, method = reported[metric], "vLLM's reported figure (no per-request samples)"
        else:
            continue
        note = "imported, not compared: mrbench compare BASE CAND gates two imports"
        if not len(x):
            note = ("no per-request samples (vllm bench serve without --save-detailed): a "
                    "compare can only report vLLM's aggregate as info, not test it")
        checks.append(Check(wl, metric, "ms", value if side == "baseline" else None,
                            value if side == "candidate" else None, None, None, None, "-",
                            method, Verdict.INFO, note, delta_kind=DeltaKind.NONE,
                            bar=NOT_GATED))
    metrics = {k: v for k, v in latency_summary(res).items()
               if not (isinstance(v, float) and math.isnan(v))}
    metrics.update(_file_figures(files))
    src = [dict(path=str(f.path.resolve()), sha256=f.sha256, bytes=f.size, kind=f.kind,
                **{key: f.data.get(key) for key in SETUP if key in f.data},
                rows=len(f.requests), itl_gaps=len(f.itl), per_request=f.per_request,
                e2e_source=f.e2e_source, itl_steps_lower_bound=f.itl_steps,
                concurrency_bound=None if f.concurrency_bound is None else
                dict(value=f.concurrency_bound[0], basis=f.concurrency_bound[1]),
                notes=f.notes) for f in files]
    imported = dict(tool=f"vllm bench {kind}", target=TARGET, side=side, label=label,
                    files=src, per_request="+".join(per_request), notes=notes,
                    statistics=__doc__.split("Statistics:", 1)[1].strip())
    env = environment()
    setup = {key: first.data.get(key) for key in SETUP
             if key in first.data and key not in ("date", "label")}
    # what compare gates: the harness's default thresholds, on the P99s vllm bench measures
    suite = dict(name=wl, description=f"imported vllm bench {kind} results",
                 thresholds=dict(latency_metrics=list(MEASURED[kind])),
                 workloads=[dict(id=wl, workload=wl, params=setup)])
    manifest = Manifest(created=env["created"], git_sha=None, imported=imported, importer=env,
                    suite=suite, target=TARGET, sides={side: dict(runner=label, device=None,
                                                     model=first.data.get("model_id"))},
                    workloads={wl: dict(workload=wl, entry=wl, params=setup,
                                        source=[s["path"] for s in src],
                                        items=len(res.requests))},
                    resolved={wl: {side: res.resolved}}, percentiles=list(PERCENTILES))
    summary = RunSummary.build(
        checks, [], suite=wl, target=TARGET, baseline=label if side == "baseline" else None,
        candidate=label if side == "candidate" else None, candidate_faults=[],
        metrics={wl: {side: metrics}},
        imported=dict(kind=kind, files=[f.path.name for f in files],
                      per_request=imported["per_request"], requests=len(res.requests),
                      itl_gaps=len(res.itl), notes=notes))
    writer = RunWriter(out_dir)
    writer.add_side(wl, side, res)
    return writer.commit(manifest, summary)
