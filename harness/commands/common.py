"""What several commands share: the run options, the two sides and the suite they name,
the isolation settings, the verdict table, and rendering a run's or a campaign's reports
once the results are in their final directory."""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from mrbench.contract import BadInput

from ..measure import canary
from ..measure.affinity import pin_cpus
from ..record.campaign_record import CampaignResult
from ..record.errors import ReportNotWritten
from ..record.metrics import checked_percentiles
from ..record.run_record import RunSummary, Verdict
from ..record.suite import Suite, named_suite
from ..run import engine_args, models
from ..run.engines.preload import start_method
from ..run.orchestrate import Isolation, Overrides
from ..run.targets.base import SideSpec, side_from_text
from ..run.targets.vllm.environment import parse_pd_gpus
from ..show.failure_hints import hint_for
from ..show.formatting import fmt_num, fmt_p


def run_options(p: argparse.ArgumentParser, candidate_default: str | None = "v2",
                baseline_default: str = "v1") -> None:
    """The options of every command that runs a suite (run, faults, calibrate, power)."""
    p.add_argument("--target", default="bundled",
                   help="engine of a side named without one: bundled (default) or vllm")
    p.add_argument("--candidate", default=candidate_default,
                   help=f"candidate runner, RUNNER, TARGET:RUNNER or TARGET@BUILD:RUNNER (e.g. "
                        f"vllm:v2, bundled:v1, vllm@/venvs/pr:v2; BUILD: a virtualenv, a "
                        f"Python, or a site folder with vllm/; default "
                        f"{candidate_default or 'the baseline'})")
    p.add_argument("--baseline", default=baseline_default,
                   help="baseline runner, RUNNER, TARGET:RUNNER or TARGET@BUILD:RUNNER "
                        f"(default {baseline_default})")
    p.add_argument("--device", default="cpu")
    p.add_argument("--model", help="model directory, or tiny: the bundled 4.75M model (default: "
                                    "the bundled model; on a GPU, for the vllm target, a "
                                    "random-weight Llama-3.2-1B shape made once into "
                                    "~/.cache/mrbench/models)")
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
    p.add_argument("--pd-gpus", metavar="P,D",
                   help="vllm target on CUDA: a PD pair's prefill runner on GPU P and its "
                        "decode runner on GPU D (e.g. 0,1), each in a worker process of its "
                        "own; their KV moves through the pair's connector. Default: both on "
                        "the side's GPU")
    p.add_argument("--kv-connector", choices=["example", "nixl"], default=None,
                   help="vllm target: the KV connector of a PD pair: vLLM's NixlConnector "
                        "(nixl: NIXL over UCX, each engine's runner in a worker process, "
                        "transfers timed per request) or its example connector (example, the "
                        "default: KV through files, one process)")
    p.add_argument("--gpu-memory-utilization", type=float, default=None, metavar="F",
                   help="share of the GPU all engines resident at once may take together "
                        "(each gets F / engines; default 0.85). vllm target only")
    p.add_argument("--pin-cpus", metavar="CPUS",
                   help="run the harness and every engine on these CPUs (taskset-style: 4, "
                        "4,5, 2-3); the sides alternate, so one CPU is enough for the "
                        "bundled target on a GPU and steadies its host-bound step time "
                        "(docs/detection-power.md); recorded in every result")
    p.add_argument("--canary-cpu", metavar="CPU",
                   help="with --pin-cpus: run a spin-loop canary on this other CPU, so that "
                        "waves in which the machine itself ran slow are told apart and left "
                        "out of the per-wave latency tests (harness/measure/canary.py; for virtual "
                        "GPU machines)")
    p.add_argument("--build-first", choices=["candidate", "baseline"], default=None,
                   help="whose engine is built first (default candidate: one that cannot "
                        "start costs no baseline start). An A/A run with each order is the "
                        "control for a bias that follows build order (recorded in every "
                        "result)")
    p.add_argument("--cold-engines", choices=["rebuild", "keep"], default=None,
                   help="an engine whose start compiled kernels (a cold compile cache): "
                        "start it again in a new process before measuring it (rebuild), or "
                        "measure it as it is (keep). Default: rebuild on CUDA, where a "
                        "process that compiled its kernels ran its host work ~10 %% slower "
                        "for its life, keep on CPU (docs/detection-power.md)")
    p.add_argument("--engine-starts", type=int, default=None, metavar="N",
                   help="engines that start together (default: on a GPU one per CPU, "
                        "at most 16; on CPU 1). With N > 1 the run's engines are planned up "
                        "front and those that fit the device start together, before any of "
                        "their workloads is measured (docs/architecture.md, engine plan)")
    p.add_argument("--in-process", action="store_true",
                   help="run engines in this process (debugging; a crash or hang of an "
                        "engine then ends the run)")
    p.add_argument("--engine-arg", action="append", default=[], metavar="[SIDE:]NAME=VALUE",
                   help="vllm target: one of vLLM's own engine arguments by its EngineArgs "
                        "name (repeatable; VALUE as JSON or a YAML scalar: 2, true, fp8), for "
                        "both sides or, with SIDE baseline: or candidate:, one; over a "
                        "suite's engine_args. Checked before any engine starts")
    p.add_argument("--json", action="store_true", help="print the JSON result instead of a table")


def isolation_of(a: argparse.Namespace) -> Isolation:
    """The engine isolation settings of --in-process, --timeout, --gpu-memory-utilization,
    and the vllm target's --vllm-sync-check and --pd-gpus (the run stamps them on both
    sides). --pin-cpus takes effect here, on this process, before any engine process is
    spawned: they inherit it. --canary-cpu starts its canary here, before the pin."""
    start_method(a.device)             # MRBENCH_ENGINE_START: a bad value is bad input
    if a.canary_cpu is not None:       # first: it needs a CPU outside the engines' pin
        canary.start(a.canary_cpu, a.pin_cpus)
    if a.pin_cpus:
        pin_cpus(a.pin_cpus)
    pd_gpus = parse_pd_gpus(a.pd_gpus) if getattr(a, "pd_gpus", None) else None
    if a.timeout is not None and not a.timeout > 0:
        raise BadInput(f"--timeout must be > 0 seconds, got {a.timeout}")
    gmu = a.gpu_memory_utilization
    if gmu is not None and not 0 < gmu <= 0.95:
        raise BadInput(f"--gpu-memory-utilization must be in (0, 0.95], got {gmu}")
    if a.engine_starts is not None and a.engine_starts < 1:
        raise BadInput(f"--engine-starts must be >= 1, got {a.engine_starts}")
    return Isolation(in_process=a.in_process, starts_at_once=a.engine_starts,
                     timeout_s=a.timeout if a.timeout is not None else Isolation.timeout_s,
                     gpu_memory_utilization=gmu if gmu is not None
                     else Isolation.gpu_memory_utilization,
                     build_first=a.build_first or Isolation.build_first,
                     cold_engines=a.cold_engines or Isolation.cold_engines,
                     vllm_sync_check=a.vllm_sync_check or None, pd_gpus=pd_gpus,
                     kv_connector=getattr(a, "kv_connector", None) or "example")


def percentiles_option(p: argparse.ArgumentParser, default: str) -> None:
    """--percentiles, as `vllm bench serve --metric-percentiles` takes it (run, compare)."""
    p.add_argument("--percentiles", metavar="P,P,...",
                   help="the percentiles of the summary's pNN_ figures (p50_ttft_ms, "
                        "p99.9_itl_ms, ...), as vLLM's --metric-percentiles: numbers in "
                        f"(0, 100], comma-separated; default {default}")


def percentiles_of(text: str | None) -> tuple[float, ...] | None:
    """--percentiles checked (metrics.checked_percentiles), None when not given; BadInput
    (one line) for anything but numbers in (0, 100]."""
    if text is None:
        return None
    try:
        values = [float(w) for w in text.split(",")]
    except ValueError:
        raise BadInput(f"--percentiles takes numbers, comma-separated (e.g. 50,90,99), got "
                       f"{text!r}") from None
    try:
        return checked_percentiles(values)
    except ValueError as e:
        raise BadInput(f"--percentiles {text!r}: {e}") from None


def suite_and_sides(a: argparse.Namespace, faults: tuple[str, ...] = ()
                    ) -> tuple[Suite, SideSpec, SideSpec, Overrides]:
    """The suite the positional names make (suite.named_suite), the baseline and candidate
    sides, and the CLI overrides."""
    suite = named_suite(a.what)
    if a.limit is not None and a.limit < 1:
        raise BadInput(f"--limit must be >= 1, got {a.limit}")
    seed = 0 if a.seed is None else a.seed
    base = side_from_text(a.baseline, a.target, a.device, a.model, (), seed)
    cand = side_from_text(a.candidate or a.baseline, a.target, a.device, a.model, faults, seed)
    model = models.resolve(a.model, {base.target, cand.target}, a.device)
    if model != a.model:
        base, cand = (dataclasses.replace(s, model=model) for s in (base, cand))
    base, cand = engine_args.with_cli(base, cand, getattr(a, "engine_arg", None) or [])
    return suite, base, cand, Overrides(a.seed, a.limit, a.dataset, a.time_scale,
                                        a.max_input_len, a.scorer)


def print_summary(summary: RunSummary, path: Path, as_json: bool, report: bool = True) -> None:
    """A run's verdict table (or its summary as summary.json holds it), failures, and
    where the report is (`report`: it was written)."""
    if as_json:
        print(json.dumps(summary.to_json_dict(), indent=2, default=str))
        return
    rows = [("workload", "metric", "baseline", "candidate", "delta", "p", "verdict")]
    for c in summary.checks:
        rows.append((c.workload, c.metric, fmt_num(c.baseline), fmt_num(c.candidate),
                     fmt_num(c.delta, signed=True), fmt_p(c.p_value),
                     c.verdict.upper() if c.verdict == Verdict.REGRESSION else str(c.verdict)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)))
    for f in summary.failures:
        hint = hint_for(f.error)
        print(f"FAILED {f.workload} ({f.side}): {f.error}\n  what happened: {hint.happened}"
              f"\n  what to try: {hint.to_try}")
    for u in summary.unsupported:
        print(f"UNSUPPORTED HERE {u.workload} ({u.side}, {u.target}): {u.reason}")
    for wl, sides in summary.metrics.items():
        added = (sides.get("candidate") or {}).get("ruler_added_pct")
        if added is not None:     # set beside the median step's delta: a ruler that hid shows
            print(f"ruler {wl}: the candidate's slow-step busy work added {added:+.1f} % to "
                  f"the steps it slowed (its own account)")
    if not summary.checks and not summary.failures:
        print("NOT MEASURED: no workload ran here" + (
            " (each was unsupported here)" if summary.unsupported else ""))
    print(f"verdict: {summary.verdict}")
    print(f"report: {path / 'report.html'}" if report else f"results: {path} (no report)")


def print_campaign_json(res: CampaignResult) -> None:
    """A campaign's result as its file holds it, without the environment block."""
    print(json.dumps({k: v for k, v in res.file_json().items() if k != "environment"},
                     indent=2))


def render_run(path: Path) -> Path:
    """Write `path`/report.html from the committed run in its final directory; a write the
    disk refuses is ReportNotWritten (one line; the run stays as committed)."""
    from ..show.report import render_report  # lazy: matplotlib, only for commands that render
    return render_report(path)


def try_render_run(path: Path) -> ReportNotWritten | None:
    """render_run, its ReportNotWritten returned instead of raised: a command that committed
    a run still prints the run's verdict (and its JUnit file), then says the report is
    missing in one line and exits 3."""
    try:
        render_run(path)
    except ReportNotWritten as e:
        return e
    return None


def render_campaign_reports(path: Path, kind: str, res: CampaignResult) -> Path:
    """Every run's report.html under the committed campaign directory, then the campaign's
    own (its matrix or table links to theirs); `kind` is faults, calibrate or power."""
    from ..show.campaign_report import render_campaign  # lazy: matplotlib, as in render_run
    for run in sorted(p for p in path.iterdir() if (p / "summary.json").is_file()):
        render_run(run)
    return render_campaign(path, kind, res)
