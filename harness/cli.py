"""mrbench: replay workloads on a candidate and a baseline model runner and gate regressions.

Exit codes: 0 pass, 1 regression, 2 bad input, 3 a run failed.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

from .errors import EXIT_BAD_INPUT, EXIT_PASS, BadInput


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line and exit 2 (no usage dump)."""

    def error(self, message: str) -> None:    # type: ignore[override]
        raise BadInput(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="mrbench", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="run suites or workloads on baseline and candidate")
    r.add_argument("what", nargs="*", default=["quick"], metavar="SUITE|WORKLOAD",
                   help="shipped suite name, suite YAML path, or workload name (default quick)")
    _run_options(r)
    r.add_argument("--fault", action="append", default=[], metavar="NAME",
                   help="fault switch for the candidate (repeatable)")
    r.add_argument("--save-reference", action="store_true",
                   help="store both sides' op/alloc counts as the reference for this build")

    f = sub.add_parser("faults", help="the catch matrix: the suite clean, then once per fault")
    f.add_argument("what", nargs="*", default=["quick"], metavar="SUITE|WORKLOAD")
    _run_options(f)
    f.add_argument("--fault", action="append", default=[], metavar="NAME",
                   help="only these faults (repeatable; default: every fault of the target)")
    f.add_argument("--ruler", action="append", default=[], metavar="slow-step:PCT",
                   help="also a latency ruler: PCT %% of the forward's time added to every "
                        "V2 step (bundled target); it must be caught like a fault")

    k = sub.add_parser("calibrate", help="A/A: the suite N times with no change; false alarms")
    k.add_argument("what", nargs="*", default=["quick"], metavar="SUITE|WORKLOAD")
    _run_options(k, candidate_default=None)
    k.add_argument("-n", type=int, default=10, help="number of runs (default 10)")
    k.add_argument("--max-rate", type=float, default=0.10,
                   help="exit 1 if any check's false-alarm rate is above this (default 0.10)")

    pw = sub.add_parser("power", help="detection power: the suite clean and with slow-step:PCT "
                                      "on the candidate, N runs each; the minimum detectable "
                                      "slowdown per latency check")
    pw.add_argument("what", nargs="*", default=["quick"], metavar="SUITE|WORKLOAD")
    _run_options(pw, candidate_default=None)
    pw.set_defaults(baseline="v2")           # the ruler lives in V2: A/A on V2 by default
    pw.add_argument("-n", type=int, default=5, help="runs per setting (default 5)")
    pw.add_argument("--pcts", default="10,25,50",
                    help="slow-step sizes, %% of the forward's time (default 10,25,50)")

    st = sub.add_parser("steps", help="record a scheduler-step trace, or replay one on a runner")
    ssub = st.add_subparsers(dest="steps_cmd", required=True, parser_class=_Parser)
    rec = ssub.add_parser("record", help="run GSM8K prompts on one runner, write the step trace")
    rec.add_argument("--out", type=Path, required=True, help="trace file (JSONL)")
    rec.add_argument("--runner", default="v1")
    rec.add_argument("--mode", choices=["pd", "colocated"], default="pd")
    rec.add_argument("--limit", type=int, default=16)
    rec.add_argument("--seed", type=int, default=None, help="problem-generator seed")
    rec.add_argument("--max-num-seqs", type=int, default=4)
    rec.add_argument("--model")
    rep_ = ssub.add_parser("replay", help="feed a step trace to a runner; first divergent step")
    rep_.add_argument("trace", type=Path)
    rep_.add_argument("--runner", default="v2")
    rep_.add_argument("--fault", action="append", default=[], metavar="NAME")
    rep_.add_argument("--model")
    rep_.add_argument("--json", action="store_true")

    c = sub.add_parser("compare", help="gate the candidate side of one run against another's")
    c.add_argument("runs", nargs="+", type=Path, metavar="RUN",
                   help="BASE CAND, or CAND alone with --baseline last-pass")
    c.add_argument("--baseline", choices=["last-pass"],
                   help="last-pass: the newest passing comparable run in the history")
    c.add_argument("--db", type=Path, help="history database (default results/history.sqlite)")
    c.add_argument("--side", default="candidate", choices=["candidate", "baseline"],
                   help="which side of each run to compare (default candidate)")
    c.add_argument("--out", type=Path)
    c.add_argument("--json", action="store_true")

    ib = sub.add_parser("import-bench", help="vllm bench serve/latency JSON -> a results "
                        "directory (for compare, report, history)")
    ib.add_argument("files", nargs="+", type=Path, metavar="FILE.json",
                    help="one or more result files of one setup (pooled)")
    ib.add_argument("--out", type=Path, help="results directory (default results/<time>-...)")
    ib.add_argument("--side", default="candidate", choices=["candidate", "baseline"],
                    help="the side the data is stored as (default candidate, what compare reads)")
    ib.add_argument("--label", help="name of the run (default: vLLM's label, else file name)")
    ib.add_argument("--json", action="store_true")

    h = sub.add_parser("history", help="result history (SQLite) and trend reports")
    hsub = h.add_subparsers(dest="history_cmd", required=True, parser_class=_Parser)
    ha = hsub.add_parser("add", help="append runs to the history (creates the database)")
    ha.add_argument("runs", nargs="+", type=Path)
    hr = hsub.add_parser("report", help="trend report with change points, one HTML file")
    hr.add_argument("--out", type=Path, help="HTML file (default: history.html beside the db)")
    hr.add_argument("--latency-min-rel", type=float, default=0.20,
                    help="smallest latency/throughput step to mark (default 0.20)")
    hr.add_argument("--absolute-latency", action="store_true",
                    help="judge latency on the candidate's own figures, not the per-run "
                         "candidate/baseline ratio (for a stable, dedicated host)")
    hr.add_argument("--json", action="store_true", help="print the change points as JSON")
    hl = hsub.add_parser("list", help="the runs in the history")
    for x in (ha, hr, hl):
        x.add_argument("--db", type=Path, help="database (default results/history.sqlite)")

    rep = sub.add_parser("report", help="(re)render report.html of results directories")
    rep.add_argument("runs", nargs="+", type=Path)
    rep.add_argument("--markdown", action="store_true",
                     help="print the verdict table (or a faults matrix) as Markdown instead")

    ls = sub.add_parser("list", help="workloads, suites, targets and faults")
    ls.add_argument("--json", action="store_true")
    return p


def _run_options(p: argparse.ArgumentParser, candidate_default: str | None = "v2") -> None:
    p.add_argument("--target", default="bundled",
                   help="engine of a side named without one: bundled (default) or vllm")
    p.add_argument("--candidate", default=candidate_default,
                   help=f"candidate runner, RUNNER or TARGET:RUNNER (e.g. vllm:v2, bundled:v1; "
                        f"default {candidate_default or 'the baseline'})")
    p.add_argument("--baseline", default="v1",
                   help="baseline runner, RUNNER or TARGET:RUNNER (default v1)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--model", help="model directory (default: the target's bundled model)")
    p.add_argument("--dataset", help="GSM8K JSONL path (or hf:openai/gsm8k when online)")
    p.add_argument("--out", type=Path, help="results directory (default results/<time>-<name>)")
    p.add_argument("--seed", type=int, help="engine seed and problem-generator seed")
    p.add_argument("--limit", type=int, help="problems / requests per workload")
    p.add_argument("--time-scale", type=float,
                   help="trace replay: arrival times x this (0.5 = twice as fast)")
    p.add_argument("--max-input-len", type=int, help="trace replay: clip prompts to this")
    p.add_argument("--scorer", choices=["mrbench", "lm-eval"],
                   help="GSM8K: score with mrbench's extraction or lm-eval's own filters")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds one engine call may take before the engine counts as hung "
                        "(default 900)")
    p.add_argument("--vllm-sync-check", choices=["warn", "error"],
                   help="vllm target: also run vLLM's own VLLM_GPU_SYNC_CHECK after warmup and "
                        "count its warnings (CUDA only; vLLM does not arm it on CPU)")
    p.add_argument("--gpu-memory-utilization", type=float, default=None, metavar="F",
                   help="share of the GPU all engines resident at once may take together "
                        "(each gets F / engines; default 0.85). vllm target only")
    p.add_argument("--in-process", action="store_true",
                   help="run engines in this process (debugging; a crash or hang of an "
                        "engine then ends the run)")
    p.add_argument("--json", action="store_true", help="print the JSON result instead of a table")


def _side(value: str, target: str, device: str, model: str | None, faults: tuple[str, ...],
          seed: int):
    from .targets.base import TARGETS, SideSpec
    t, _, runner = value.rpartition(":")
    t = t or target
    if t not in TARGETS:
        raise BadInput(f"unknown target {t!r} in {value!r}; known: {', '.join(sorted(TARGETS))}")
    if not runner:
        raise BadInput(f"runner {value!r} names no runner (e.g. v2, vllm:v1)")
    return SideSpec(runner=runner, device=device, model=model, faults=faults, seed=seed,
                    target=t)


def _isolation(a: argparse.Namespace):
    import os

    from .orchestrate import Isolation
    if a.vllm_sync_check:             # read by the vllm target in each engine process
        os.environ["MRBENCH_VLLM_SYNC_CHECK"] = a.vllm_sync_check
    if a.timeout is not None and not a.timeout > 0:
        raise BadInput(f"--timeout must be > 0 seconds, got {a.timeout}")
    gmu = a.gpu_memory_utilization
    if gmu is not None and not 0 < gmu <= 0.95:
        raise BadInput(f"--gpu-memory-utilization must be in (0, 0.95], got {gmu}")
    return Isolation(in_process=a.in_process,
                     timeout_s=a.timeout if a.timeout is not None else Isolation.timeout_s,
                     gpu_memory_utilization=gmu if gmu is not None
                     else Isolation.gpu_memory_utilization)


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def print_summary(summary: dict, path: Path, as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    rows = [("workload", "metric", "baseline", "candidate", "delta", "p", "verdict")]
    for c in summary["checks"]:
        rows.append((c["workload"], c["metric"], _fmt(c["baseline"]), _fmt(c["candidate"]),
                     _fmt(c["delta"]), _fmt(c["p_value"]), c["verdict"].upper()
                     if c["verdict"] == "regression" else c["verdict"]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)))
    for f in summary["failures"]:
        print(f"FAILED {f['workload']} ({f['side']}): {f['error']}")
    for u in summary.get("unsupported", []):
        print(f"UNSUPPORTED HERE {u['workload']} ({u['side']}, {u['target']}): {u['reason']}")
    print(f"verdict: {summary['verdict']}")
    print(f"report: {path / 'report.html'}")


def _suite_and_sides(a: argparse.Namespace, faults: tuple[str, ...] = ()):
    from mrbench.workloads import workloads as known_workloads

    from .orchestrate import Overrides
    from .suite import Suite, load_suite, shipped_suites, single_workload_suite
    suites = []
    for w in a.what:
        if w in known_workloads() and w not in shipped_suites():
            suites.append(single_workload_suite(w))
        else:
            suites.append(load_suite(w))
    if len(suites) == 1:
        suite = suites[0]
    else:
        entries = [e for s in suites for e in s.workloads]
        ids = [e.id for e in entries]
        if len(set(ids)) != len(ids):
            raise BadInput(f"workload ids repeat across {a.what}; run them separately")
        suite = Suite(name="+".join(s.name for s in suites), thresholds=suites[0].thresholds,
                      workloads=entries)
    if a.limit is not None and a.limit < 1:
        raise BadInput(f"--limit must be >= 1, got {a.limit}")
    seed = 0 if a.seed is None else a.seed
    base = _side(a.baseline, a.target, a.device, a.model, (), seed)
    cand = _side(a.candidate or a.baseline, a.target, a.device, a.model, faults, seed)
    return suite, base, cand, Overrides(a.seed, a.limit, a.dataset, a.time_scale,
                                        a.max_input_len, a.scorer)


def cmd_run(a: argparse.Namespace) -> int:
    from .orchestrate import run_suite
    from .results import default_out
    suite, base, cand, overrides = _suite_and_sides(a, tuple(a.fault))
    out = a.out or default_out(suite.name)
    summary, code, path = run_suite(suite, base, cand, overrides, out,
                                    save_reference=a.save_reference, isolation=_isolation(a))
    print_summary(summary, path, a.json)
    if a.save_reference and not a.json:
        print("references: " + ("not saved (a side failed)" if summary["failures"] else
                                "saved under results/baselines/op-counts/"))
    return code


def cmd_faults(a: argparse.Namespace) -> int:
    from .campaign import fault_matrix
    from .errors import EXIT_REGRESSION, EXIT_RUN_FAILED
    from .results import default_out
    from .targets.base import get_target
    suite, base, cand, overrides = _suite_and_sides(a)
    target = get_target(cand.target)
    faults = (a.fault or list(target.info().get("faults", []))) + a.ruler
    for f in faults:           # the target's own check: its faults, and rulers like slow-step
        target.validate(replace(cand, faults=(f,)))
    out = a.out or default_out(f"faults-{suite.name}")
    res, path = fault_matrix(suite, base, cand, faults, overrides, out,
                             isolation=_isolation(a))
    if a.json:
        print(json.dumps({k: v for k, v in res.items() if k != "environment"}, indent=2))
    else:
        c = res["clean"]
        print(f"clean: {c['verdict']} ({c['false_alarms']} false alarms"
              f"{': ' + ', '.join(c['flagged']) if c['flagged'] else ''})")
        for name, r in res["faults"].items():
            by = ", ".join(r["by"]) if r["by"] else "-"
            print(f"{name:<26} {'CAUGHT' if r['caught'] else 'missed'}  by {by}")
        print(f"results: {path}")
    runs = [res["clean"], *res["faults"].values()]
    if any(r["failures"] for r in runs):
        return EXIT_RUN_FAILED
    ok = res["clean"]["false_alarms"] == 0 and all(r["caught"] for r in res["faults"].values())
    return EXIT_PASS if ok else EXIT_REGRESSION


def cmd_calibrate(a: argparse.Namespace) -> int:
    from .campaign import calibrate, fmt_rate
    from .errors import EXIT_REGRESSION, EXIT_RUN_FAILED
    from .results import default_out
    if a.n < 1:
        raise BadInput(f"-n must be >= 1, got {a.n}")
    if not 0 <= a.max_rate <= 1:
        raise BadInput(f"--max-rate must be in [0, 1], got {a.max_rate}")
    suite, base, cand, overrides = _suite_and_sides(a)
    out = a.out or default_out(f"calibrate-{suite.name}")
    res, path = calibrate(suite, base, cand, a.n, overrides, out, isolation=_isolation(a))
    if a.json:
        print(json.dumps({k: v for k, v in res.items() if k != "environment"}, indent=2))
    else:
        print(f"{res['baseline']} vs {res['candidate']}, {res['n']} runs of {res['suite']}")
        w = max(len(k) for k in res["checks"])
        for name, c in res["checks"].items():
            spread = "" if c["delta_max"] is None else \
                f"  delta {c['delta_min']:+.3g}..{c['delta_max']:+.3g}"
            print(f"{name:<{w}}  false alarms {fmt_rate(c)}{spread}")
        print(f"results: {path}")
    if res["errors"]:
        return EXIT_RUN_FAILED
    return EXIT_PASS if res["max_rate"] <= a.max_rate else EXIT_REGRESSION


def cmd_power(a: argparse.Namespace) -> int:
    from .campaign import power
    from .errors import EXIT_RUN_FAILED
    from .results import default_out
    from .targets.base import get_target
    if a.n < 1:
        raise BadInput(f"-n must be >= 1, got {a.n}")
    try:
        pcts = sorted({float(x) for x in a.pcts.split(",") if x.strip()})
    except ValueError:
        raise BadInput(f"--pcts must be numbers separated by commas, got {a.pcts!r}") from None
    suite, base, cand, overrides = _suite_and_sides(a)
    if not pcts:
        raise BadInput("--pcts is empty")
    for p in pcts:                         # the target's own check of the ruler
        get_target(cand.target).validate(replace(cand, faults=(f"slow-step:{p:g}",)))
    out = a.out or default_out(f"power-{suite.name}")
    res, path = power(suite, base, cand, pcts, a.n, overrides, out, isolation=_isolation(a))
    if a.json:
        print(json.dumps({k: v for k, v in res.items() if k != "environment"}, indent=2))
    else:
        print(f"{res['baseline']} vs {res['candidate']} + slow-step, {a.n} runs each, "
              f"{res['suite']}")
        w = max((len(k) for k in res["checks"]), default=10)
        print(f"{'check':<{w}}  false alarms  " + "  ".join(f"{p:>6g}%" for p in pcts)
              + "  MDE")
        for name, c in res["checks"].items():
            det = "  ".join(f"{c['detection'][f'{p:g}']['rate']:>6.0%}" for p in pcts)
            mde = "-" if c["mde_pct"] is None else f"{c['mde_pct']:g}%"
            gate = "" if c["judged"] else "  (reported, not judged)"
            print(f"{name:<{w}}  {c['false_alarms']:>2}/{a.n:<2}        {det}  {mde}{gate}")
        print(f"results: {path}")
    return EXIT_RUN_FAILED if res["errors"] else EXIT_PASS


def cmd_steps(a: argparse.Namespace) -> int:
    from mrbench.runner_impl import FAULTS, RunnerError

    from . import steptrace
    from .errors import EXIT_REGRESSION
    if a.steps_cmd == "record":
        from mrbench.workloads.gsm8k_problems import HELD_OUT_SEEDS
        from mrbench.workloads.prompts import STOP, gsm8k_prompts
        if a.limit < 1 or a.max_num_seqs < 1:
            raise BadInput("--limit and --max-num-seqs must be >= 1")
        if a.runner not in ("v1", "v2"):
            raise BadInput(f"--runner must be v1 or v2, got {a.runner!r}")
        prompts = gsm8k_prompts(HELD_OUT_SEEDS[3] if a.seed is None else a.seed, a.limit)
        try:
            h = steptrace.record(prompts, 320, list(STOP), a.out, runner=a.runner,
                                 model=a.model, pd_disagg=a.mode == "pd",
                                 max_num_seqs=a.max_num_seqs)
        except RunnerError as e:
            raise BadInput(str(e)) from None
        print(f"recorded {h['steps']} steps of {a.runner} ({a.mode}) to {a.out}")
        return EXIT_PASS
    bad = [f for f in a.fault if f not in FAULTS]
    if bad:
        raise BadInput(f"unknown fault {bad[0]!r}; known: {', '.join(sorted(FAULTS))}")
    if a.runner not in ("v1", "v2"):
        raise BadInput(f"--runner must be v1 or v2, got {a.runner!r}")
    try:
        res = steptrace.replay(a.trace, a.runner, tuple(a.fault), a.model)
    except RunnerError as e:
        raise BadInput(f"step trace {a.trace}: {e}") from None
    if a.json:
        print(json.dumps(res.to_dict(), indent=2))
    elif res.first is None:
        print(f"{a.runner}: agrees with the recording on all {res.steps} steps")
    else:
        f = res.first
        print(f"{a.runner}: first divergent step: {f.instance} step {f.step} (trace line "
              f"{f.event_index}), request {f.req_id}: recorded {f.recorded}, replayed "
              f"{f.replayed}; {res.diverged_steps} of {res.steps} steps differ")
    return EXIT_PASS if res.first is None else EXIT_REGRESSION


def cmd_compare(a: argparse.Namespace) -> int:
    from .compare import compare, latency_summary
    from .orchestrate import overall_verdict
    from .results import RunWriter, check_out, default_out, environment, load_side, read_run
    from .suite import Thresholds
    if a.baseline == "last-pass":
        if len(a.runs) != 1:
            raise BadInput("with --baseline last-pass give only the candidate run")
        from . import history
        a.cand = a.runs[0]
        like, _ = history.run_record(a.cand)
        found = history.last_pass(a.db or history.DEFAULT_DB, like)
        if found is None:
            raise BadInput(f"no passing run comparable with {a.cand} in the history "
                           f"({a.db or history.DEFAULT_DB})")
        a.base = Path(found)
        print(f"baseline: {a.base} (last passing comparable run)")
    elif len(a.runs) != 2:
        raise BadInput("compare needs BASE and CAND runs (or CAND with --baseline last-pass)")
    else:
        a.base, a.cand = a.runs
    bm, bs = read_run(a.base)
    cm, cs = read_run(a.cand)
    suite = bm.get("suite", {})
    overrides = {w.get("id"): w.get("thresholds") or {} for w in suite.get("workloads", [])}
    entry_of = {w: (d or {}).get("entry", w) for w, d in bm.get("workloads", {}).items()}
    common = [w for w in bm.get("workloads", {}) if w in cm.get("workloads", {})]
    if not common:
        raise BadInput(f"{a.base} and {a.cand} share no workload")
    out = a.out or default_out("compare")
    check_out(out)
    writer = RunWriter(out)
    checks, metrics = [], {}
    for w in common:
        b, c = load_side(a.base, w, a.side), load_side(a.cand, w, a.side)
        b.resolved = bm.get("resolved", {}).get(w, {}).get(a.side, {})
        c.resolved = cm.get("resolved", {}).get(w, {}).get(a.side, {})
        writer.add_side(w, "baseline", b)
        writer.add_side(w, "candidate", c)
        metrics[w] = dict(baseline=latency_summary(b), candidate=latency_summary(c))
        th = Thresholds.model_validate({**suite.get("thresholds", {}),
                                        **overrides.get(entry_of.get(w, w), {})})
        checks += [x.to_dict() for x in compare(w, b, c, th)]
    verdict, code = overall_verdict(checks, [])
    summary = dict(verdict=verdict, suite=f"compare {a.base.name} -> {a.cand.name}",
                   target=bs.get("target"), baseline=bs.get("candidate"),
                   candidate=cs.get("candidate"),
                   checks=checks, failures=[], metrics=metrics)
    manifest = dict(environment(), compared=dict(base=str(a.base), cand=str(a.cand),
                                                 side=a.side),
                    base_manifest=bm, cand_manifest=cm)
    path = writer.commit(manifest, summary)
    print_summary(summary, path, a.json)
    return code


def cmd_import_bench(a: argparse.Namespace) -> int:
    from .bench_import import import_bench
    from .results import default_out, read_run
    path = import_bench(a.files, a.out or default_out("vllm-bench"), side=a.side,
                        label=a.label)
    if a.json:
        print(json.dumps(dict(run=str(path), **read_run(path)[1]["imported"]), indent=2))
    else:
        print(path)
    return EXIT_PASS


def cmd_history(a: argparse.Namespace) -> int:
    from . import history
    db = a.db or history.DEFAULT_DB
    if a.history_cmd == "add":
        n = history.add(db, a.runs)
        print(f"added {n} of {len(a.runs)} runs to {db}")
        return EXIT_PASS
    if a.history_cmd == "list":
        for r in history.runs(db):
            print(f"{r['created'][:19]}  {(r['git_sha'] or '?')[:10]}  {r['suite']:<10} "
                  f"{r['candidate']} vs {r['baseline']}  {r['verdict']:<10} {r['run_dir']}")
        return EXIT_PASS
    from .history_report import render
    if a.latency_min_rel < 0:
        raise BadInput(f"--latency-min-rel must be >= 0, got {a.latency_min_rel}")
    history.open_existing(db).close()
    out = a.out or db.with_name("history.html")
    path, res = render(db, out, a.latency_min_rel, a.absolute_latency)
    changes = [dict(group=g["key"], workload=c["workload"], metric=c["metric"],
                    run_number=c["index"] + 1, run_dir=c["run"]["run_dir"],
                    git_sha=c["run"]["git_sha"], before=c["cp"].before, after=c["cp"].after,
                    rel_change=c["cp"].rel_change, p_value=c["cp"].p_value)
               for g in res["groups"] for c in g["changes"]]
    if a.json:
        print(json.dumps(dict(runs=res["n_runs"], changes=changes, report=str(path)),
                         indent=2, default=str))
    else:
        for c in changes:
            print(f"change: {c['workload']}/{c['metric']} from run {c['run_number']} "
                  f"({(c['git_sha'] or '?')[:10]}): {c['before']:.4g} -> {c['after']:.4g}")
        print(f"{len(changes)} change points in {res['n_runs']} runs; report: {path}")
    return EXIT_PASS


def cmd_report(a: argparse.Namespace) -> int:
    from .report import render_report
    from .results import read_run
    if a.markdown:
        from .markdown import faults_markdown, run_markdown
        for run in a.runs:
            print(faults_markdown(run) if (run / "faults.json").is_file() else run_markdown(run))
        return EXIT_PASS
    for run in a.runs:
        read_run(run)
        print(render_report(run))
    return EXIT_PASS


def cmd_list(a: argparse.Namespace) -> int:
    from mrbench.runner_impl import FAULTS
    from mrbench.workloads import workloads

    from .suite import load_suite, shipped_suites
    from .targets.base import TARGETS
    info = dict(
        workloads={n: w.description for n, w in workloads().items()},
        suites={n: load_suite(n).description for n in shipped_suites()},
        targets={n: f().info() for n, f in TARGETS.items()},
        faults={n: asdict(f) for n, f in FAULTS.items()})
    if a.json:
        print(json.dumps(info, indent=2, default=str))
        return EXIT_PASS
    for section in ("workloads", "suites"):
        print(f"{section}:")
        for n, d in info[section].items():
            print(f"  {n:<12} {d}")
    print("targets:")
    for n, d in info["targets"].items():
        print(f"  {n:<12} runners: {', '.join(d['runners'])}; faults: "
              f"{', '.join(d.get('faults') or []) or 'none'}"
              + (f"; {d['notes']}" if d.get("notes") else ""))
    print("bundled faults (apply to the candidate with --fault NAME):")
    for n, f in info["faults"].items():
        print(f"  {n:<24} vLLM PR {f['vllm_pr']}: {f['bug_class']}")
    from .targets.vllm_faults import FAULTS as VLLM_FAULTS
    print("vllm faults (--target vllm --candidate v2 --fault NAME; the vLLM release named):")
    for n, vf in VLLM_FAULTS.items():
        print(f"  {n:<24} vLLM PR {vf.pr}, vLLM {', '.join(vf.versions)}: {vf.what}")
    return EXIT_PASS


def main(argv: list[str] | None = None) -> int:
    from . import targets  # noqa: F401  (registers the targets)
    try:
        a = _parser().parse_args(argv)
        return {"run": cmd_run, "faults": cmd_faults, "calibrate": cmd_calibrate,
                "power": cmd_power,
                "steps": cmd_steps, "history": cmd_history, "import-bench": cmd_import_bench,
                "compare": cmd_compare, "report": cmd_report, "list": cmd_list}[a.cmd](a)
    except BadInput as e:
        print(f"mrbench: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("mrbench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
