"""The report's account of what ran: the verdict line's identity of the run (each side
with its build, the device, the model, the wall time), what each side's engines read back,
and the engine starts (which compiled their kernels).

Why apart from report.py: this reads the manifest only, and the manifest's free-form
blocks (`resolved`, `sides`, `builds`, `engines`, `models`) change with the targets; the
report's layout does not.
"""
from __future__ import annotations

from ..record import history
from ..record.run_record import Manifest, RunSummary
from ..run.builds import label as build_label
from ..run.engines.compile_cache import describe, describe_start
from ..run.engines.start_phases import describe_phases
from .formatting import fmt_duration, fmt_num
from .report_plots import SIDES


RAN_FIELDS = (("engine", "engine"), ("build", "build"), ("runner_class", "runner class"),
              ("attention_backend", "attention backend"), ("cudagraph_mode", "CUDA graphs"),
              ("device", "device"), ("dtype", "dtype"), ("faults", "faults"),
              ("startup_s", "engine start (s)"), ("kernels", "kernels at start"))


def _engine_of(r: dict) -> str:
    if r.get("engine_name"):
        return str(r["engine_name"])
    if r.get("vllm_version"):
        return f"vLLM {r['vllm_version']}"
    return str(r.get("target") or "?")


def what_ran(manifest: Manifest | None) -> list[dict]:
    """Per side, what actually ran (read back from the engines, across workloads). Values
    that differ between workloads are all listed."""
    if manifest is None:
        return []
    sides = manifest.sides or {}
    rows = []
    for side in SIDES:
        seen: dict[str, list[str]] = {k: [] for k, _ in RAN_FIELDS}
        for per_side in manifest.resolved.values():
            r = (per_side or {}).get(side) if isinstance(per_side, dict) else None
            if not isinstance(r, dict):
                continue
            vals = dict(r, engine=_engine_of(r), build=_build_folder(manifest, side),
                        faults=", ".join(r.get("faults") or []) or "none",
                        startup_s=fmt_num(r.get("startup_s"), sig=3),
                        kernels=describe_start(r.get("engine_start")))
            for k, _ in RAN_FIELDS:
                v = str(vals.get(k) if vals.get(k) not in (None, "") else "-")
                if v not in seen[k]:
                    seen[k].append(v)
        spec = sides.get(side) or {}
        if not any(seen.values()):
            if not spec:
                continue
            seen["device"] = [str(spec.get("device", "-"))]
        rows.append(dict(side=side, runner=f"{spec.get('target', '?')}:{spec.get('runner', '?')}",
                         **{k: "; ".join(v) or "-" for k, v in seen.items()}))
    return rows


def _model_line(manifest: Manifest | None) -> str | None:
    """The candidate's model in words: "llama-1b-seed0-bfloat16-cuda (llama-1b, 1.24e+09
    parameters, 16 layers x 2048, random weights)", or its folder's name."""
    m = ((manifest.models if manifest else None) or {}).get("candidate")
    if not isinstance(m, dict):
        return None
    shape = m.get("shape") or {}
    bits = [str(m["preset"])] if m.get("preset") else []
    if m.get("parameters"):
        bits.append(f"{fmt_num(m['parameters'], sig=3)} parameters")
    if shape.get("num_hidden_layers") and shape.get("hidden_size"):
        bits.append(f"{shape['num_hidden_layers']} layers x {shape['hidden_size']}")
    if m.get("random_weights"):
        bits.append("random weights")
    return f"{m.get('name')}" + (f" ({', '.join(bits)})" if bits else "")


def _build_folder(manifest: Manifest | None, side: str) -> str | None:
    """A side's own build by its folder (`build b-pr/site`), where it ran one: two builds of
    one vLLM release and commit (a PR's tree against main's, a fault written back into a
    copy) report the same version and commit, and only the folder tells them apart."""
    path = (((manifest.builds if manifest else None) or {}).get(side) or {}).get("path")
    return build_label(str(path)) if path else None


def identity(summary: RunSummary, manifest: Manifest | None) -> dict:
    """The verdict line's account of the run: each side as TARGET:RUNNER with its vLLM
    build where the run recorded one (history.build_identity: what the engine reported,
    else the side's build), the device (the GPU's name, else the CPU), the wall time."""
    builds = history.build_identity(manifest) if manifest is not None else {}
    sides = []
    for side in ("candidate", "baseline"):
        spec = ((manifest.sides if manifest else None) or {}).get(side) or {}
        runner = spec.get("runner") or getattr(summary, side) or "?"
        target = spec.get("target") or summary.target
        version, commit = builds.get(f"{side}_vllm_version"), builds.get(f"{side}_vllm_commit")
        folder = _build_folder(manifest, side)
        build = " ".join(x for x in (version and f"vLLM {version}", commit and f"@ {commit[:12]}",
                                     folder and f"(build {folder})") if x)
        faults = spec.get("faults") or (summary.candidate_faults if side == "candidate" else [])
        if runner != "?" or target:          # a compare or an import may name neither
            sides.append(dict(side=side, label=f"{target}:{runner}" if target else runner,
                              build=build, faults=", ".join(faults)))
    dev = (manifest.device if manifest else None) or {}
    cand = ((manifest.sides if manifest else None) or {}).get("candidate") or next(
        (r["candidate"] for r in (manifest.resolved if manifest else {}).values()
         if isinstance(r.get("candidate"), dict)), {})       # a run from before `sides`
    device = dev.get("cuda") or (f"{cand.get('device', 'cpu')} ({dev['cpu_count']} cores)"
                                 if dev.get("cpu_count") else cand.get("device"))
    return dict(sides=sides, device=device or "device not recorded",
                model=_model_line(manifest),
                duration=fmt_duration(summary.wall_s) if summary.wall_s else None)


def engine_starts(manifest: Manifest | None) -> tuple[str, list[dict]]:
    """(one sentence, one row per start) from the starts the manifest records (`engines`;
    a run from before that field: each measured engine's `engine_start`). Why a number
    first: an engine that compiled its kernels at start runs slower for its whole life
    (run/engines/compile_cache.py), so whether any did is what a reader checks; the list is for
    the one who must know which."""
    starts = ((manifest.engines or {}).get("starts") if manifest else None) or []
    if not starts and manifest is not None:
        by_pid = {}
        for per_side in manifest.resolved.values():
            for r in (per_side or {}).values():
                s = r.get("engine_start") if isinstance(r, dict) else None
                if isinstance(s, dict):         # one engine may serve several workloads
                    by_pid.setdefault(s.get("pid") or id(s), s)
        starts = list(by_pid.values())
    if not starts:
        return "engine starts not recorded", []
    rows = [dict(side=s.get("side", "?"), workloads=", ".join(s.get("workloads") or []),
                 kernels=(f"compiled ({describe(s['compile_cache_writes'])})"
                          if s.get("compile_cache_writes") else "loaded from the caches"),
                 start_s=fmt_num(s.get("start_s"), sig=3),
                 phases=describe_phases(s.get("phases") or {}), error=s.get("error") or "")
            for s in starts if isinstance(s, dict)]
    compiled = [s["compile_cache_writes"] for s in starts
                if isinstance(s, dict) and s.get("compile_cache_writes")]
    n, failed = len(rows), sum(1 for r in rows if r["error"])
    files = sum(sum(w.values()) for w in compiled)
    head = (f"compiled {files} file{'s' * (files != 1)} in {len(compiled)} of {n} engine "
            f"start{'s' * (n != 1)}" if compiled else
            f"{n} engine start{'s' * (n != 1)}, every kernel loaded from the caches")
    return head + (f"; {failed} failed" if failed else ""), rows
