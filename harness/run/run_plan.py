"""The first stage of `mrbench run`: everything decided before an engine starts.

`plan_run` validates every input (suite, workload parameters, datasets, target sides, --out,
the history database) and resolves what the run will do: the workloads in the suite's and
in the run's order, what this machine cannot run, and the plan of the engines. It starts
nothing, so bad input never leaves a partial run, and the stages after it (orchestrate:
execute, then record) take their decisions from the one `RunPlan` it returns.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from mrbench.contract import BadInput, EngineOptions, Workload
from mrbench.workloads import get_workload

from ..record import history
from ..record.results import check_out
from ..record.suite import Suite, WorkloadEntry
from . import engine_args
from .engines import plan as engine_plan
from .engines.bank import BankKey, BankSettings
from .engines.plan import EnginePlan, PlannedEngine
from .engines.worker import DEFAULT_CALL_TIMEOUT_S
from .targets.base import Footprint, SideSpec, Target, get_target, side_label

SIDES = ("baseline", "candidate")
COLD_ENGINES = ("auto", "rebuild", "keep")


@dataclass
class Overrides:
    """CLI values that override every workload's parameters where the workload has them."""

    seed: int | None = None
    limit: int | None = None
    dataset: str | None = None
    time_scale: float | None = None          # trace replay
    max_input_len: int | None = None         # trace replay
    scorer: str | None = None                # gsm8k: "mrbench" | "lm-eval"

    def unused(self, field_sets: list[set[str]]) -> list[str]:
        """Options given that no workload of the suite takes (seed and limit always apply)."""
        return [k for k, v in asdict(self).items() if v is not None
                and k not in ("seed", "limit") and not any(k in f for f in field_sets)]

    def apply(self, params: dict, fields: set[str]) -> dict:
        out = dict(params)
        for k, v in asdict(self).items():
            if v is not None and k in fields:
                out[k] = v
        return out


@dataclass
class Isolation:
    """How sessions are hosted: each in its own engine process with a deadline per call
    (mrbench.harness.run.engines.worker; the default), or in this process (`--in-process`: for
    debugging with a debugger or py-spy, where a crash or hang of the engine ends the run); how much
    of
    the GPU the engines resident at once may take together (`--gpu-memory-utilization`:
    each of them asks its engine for an equal share); and whose engine is built first
    (`--build-first`): the candidate's by default, so that a candidate that cannot start
    costs no baseline start. The other order is the control for a bias that follows build
    order rather than the runner: an A/A run should not move with it. And what becomes of
    an engine whose start compiled kernels (`--cold-engines`, harness.run.engines.compile_cache):
    `rebuild` starts it again in a new process before it is measured, `keep` measures it
    as it is, `auto` (the default) rebuilds on CUDA, where a process that compiled its
    kernels was measured to run its host work slower, and keeps on CPU, where that was
    not measured and a vLLM start costs CI tens of seconds. And how many engines start
    together (`--engine-starts`, harness.run.engines.plan): several on a GPU, one on CPU.
    And three settings of the vllm target's engines, which plan_run stamps on both sides
    (`SideSpec`), so that each engine process gets them with its side: vLLM's own sync
    check (`--vllm-sync-check`), the GPUs of a PD pair's runners (`--pd-gpus`) and a PD
    pair's KV connector (`--kv-connector`)."""

    in_process: bool = False
    timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    gpu_memory_utilization: float = 0.85
    build_first: str = "candidate"
    cold_engines: str = "auto"
    starts_at_once: int | None = None       # None: engines.plan.default_starts_at_once
    vllm_sync_check: str | None = None      # "warn" or "error"; None: off
    pd_gpus: tuple[int, int] | None = None  # (prefill, decode); None: both on the side's GPU
    kv_connector: str = "example"           # a PD pair's KV connector: example or nixl

    def resolved_for(self, devices: set[str]) -> Isolation:
        """This isolation with `cold_engines` "auto" and `starts_at_once` decided for the
        sides' devices."""
        out = self
        if out.starts_at_once is None:
            out = replace(out, starts_at_once=engine_plan.default_starts_at_once(devices))
        if out.cold_engines != "auto":
            return out
        cuda = any(d.startswith("cuda") for d in devices)
        return replace(out, cold_engines="rebuild" if cuda else "keep")

    def bank_settings(self) -> BankSettings:
        return BankSettings(timeout_s=self.timeout_s, in_process=self.in_process,
                            cold_engines=self.cold_engines,
                            starts_at_once=self.starts_at_once or 1,
                            open_order=self.open_order)

    @property
    def open_order(self) -> tuple[str, ...]:
        """The sides in the order their engines are built."""
        return (self.build_first,) + tuple(s for s in SIDES if s != self.build_first)

    def validate(self) -> None:
        """BadInput (one line) for a setting out of range, named by its option."""
        if not 0 < self.gpu_memory_utilization <= 0.95:
            raise BadInput(f"--gpu-memory-utilization must be in (0, 0.95], got "
                           f"{self.gpu_memory_utilization}")
        if self.build_first not in SIDES:
            raise BadInput(f"--build-first must be one of {', '.join(SIDES)}, got "
                           f"{self.build_first!r}")
        if self.cold_engines not in COLD_ENGINES:
            raise BadInput(f"--cold-engines must be one of {', '.join(COLD_ENGINES)}, got "
                           f"{self.cold_engines!r}")


@dataclass(frozen=True)
class PlannedWorkload:
    """One workload of the run as planned: a suite entry, or one point of a sweep entry
    (a sweep is one entry of many engine shapes), with its validated parameters, its
    prepared items and the engine options it asks for."""

    id: str                       # the entry's id, ".point" appended for a sweep's point
    entry: WorkloadEntry
    workload: Workload
    params: BaseModel
    items: Any
    options: EngineOptions


@dataclass(frozen=True)
class RunPlan:
    """What a run will do, all decided before its first engine starts. The stages after
    the plan read their choices here rather than making them again."""

    suite: Suite
    specs: dict[str, SideSpec]                  # {"baseline": ..., "candidate": ...}
    targets: dict[str, Target]                  # by target name
    isolation: Isolation                        # resolved for the sides' devices
    workloads: tuple[PlannedWorkload, ...]      # the suite's order: the record's
    ordered: tuple[PlannedWorkload, ...]        # the run's: each engine shape's back to back
    not_here: dict[str, dict[str, str]]         # {workload: {side: why this machine can't}}
    engines: EnginePlan                         # the engines of the others
    out: Path
    percentiles: tuple[float, ...]              # the summary's pNN_ (--percentiles, suite)
    save_reference: bool = False
    history_db: Path | None = None

    @property
    def base(self) -> SideSpec:
        return self.specs["baseline"]

    @property
    def cand(self) -> SideSpec:
        return self.specs["candidate"]

    def label(self, side: str) -> str:
        """The side's name in the progress lines and the record (side_label)."""
        return side_label(self.specs[side],
                          self.specs["candidate" if side == "baseline" else "baseline"])

    @property
    def target_name(self) -> str:
        """The target, or "candidate's~baseline's" for a cross-target run."""
        base, cand = self.base.target, self.cand.target
        return base if base == cand else f"{cand}~{base}"

    def engine_of(self, side: str, workload: str) -> PlannedEngine:
        """The planned engine that serves `workload` on `side`."""
        return next(e for e in self.engines.engines
                    if e.side == side and workload in e.workloads)

    def bank_key(self, e: PlannedEngine) -> BankKey:
        """The key the engine bank holds `e` under: two planned engines of equal keys are
        one resident engine, across workloads and across a campaign's runs."""
        return (e.side, _engine_key(self.targets[e.spec.target], e.spec, e.options))


def _engine_key(target: Target, spec: SideSpec, options: EngineOptions) -> Any:
    """The target's engine key; a target without one (a plug-in) reuses an engine only for
    an identical side and shape."""
    fn = getattr(target, "engine_key", None)
    return fn(spec, options) if fn else (spec, options)


def _unsupported(target: Target, spec: SideSpec, options: EngineOptions,
                 needs: frozenset[str]) -> str | None:
    fn = getattr(target, "unsupported", None)
    return fn(spec, options, needs) if fn else None


def _footprint(target: Target, spec: SideSpec, options: EngineOptions) -> Footprint | None:
    fn = getattr(target, "footprint", None)
    return fn(spec, options) if fn else None


def _workloads(suite: Suite, overrides: Overrides, targets: dict[str, Target],
               base: SideSpec, cand: SideSpec) -> list[PlannedWorkload]:
    """The suite's workloads, each validated with the overrides applied and its items
    prepared and checked against the shorter context of the two sides; a sweep's points
    in its order."""
    unused = overrides.unused([set(get_workload(e.workload).Params.model_fields)
                               for e in suite.workloads])
    if unused:
        raise BadInput(f"--{unused[0].replace('_', '-')} applies to no workload of suite "
                       f"{suite.name!r}")
    points = []
    for entry in suite.workloads:
        wl = get_workload(entry.workload)
        try:
            params = wl.Params.model_validate(
                overrides.apply(entry.params, set(wl.Params.model_fields)))
        except ValidationError as e:
            err = e.errors()[0]
            raise BadInput(f"workload {entry.id!r}: {'.'.join(map(str, err['loc']))}: "
                           f"{err['msg']}") from None
        items = wl.prepare(params)
        wl.check_items(params, items, min(targets[base.target].context_len(base),
                                          targets[cand.target].context_len(cand)))
        points += [(f"{entry.id}.{suffix}" if suffix else entry.id, entry, wl, pp, items)
                   for suffix, pp in wl.points(params)]   # a sweep: many engine shapes
    # engine options once every entry is prepared (gsm8k's may refuse a seed): a bad
    # dataset anywhere in the suite is named first
    return [PlannedWorkload(wid, entry, wl, pp, items,
                            engine_args.shape_options(wl.engine_options(pp), entry))
            for wid, entry, wl, pp, items in points]


def _plan_engines(workloads: list[PlannedWorkload], specs: dict[str, SideSpec],
                  targets: dict[str, Target], iso: Isolation, skip: set[str]
                  ) -> tuple[list[PlannedWorkload], EnginePlan]:
    """The workloads in run order (those sharing an engine shape back to back, stable
    otherwise) and the plan of their engines; `skip`: workloads that run on no engine."""
    def key(sp: SideSpec, o: EngineOptions) -> Any:
        return _engine_key(targets[sp.target], sp, replace(o, gpu_memory_share=None))
    first_seen: dict[tuple, int] = {}
    rank = [first_seen.setdefault(tuple(key(sp, w.options) for _, sp in sorted(specs.items())),
                                  len(first_seen)) for w in workloads]
    ordered = [w for _, w in sorted(zip(rank, workloads), key=lambda t: t[0])]   # stable
    fps: dict[tuple[str, Any], Footprint | None] = {}

    def footprint(sp: SideSpec, o: EngineOptions) -> Footprint | None:
        k = (sp.target, key(sp, o))
        if k not in fps:
            fps[k] = _footprint(targets[sp.target], sp, o)
        return fps[k]

    device = next(iter(specs.values())).device
    eplan = engine_plan.plan(
        [(w.id, w.options) for w in ordered if w.id not in skip], specs, key, footprint,
        iso.gpu_memory_utilization, iso.starts_at_once or 1,
        engine_plan.device_memory_bytes(device) if device.startswith("cuda")
        else engine_plan.host_memory_bytes(), engine_plan.host_memory_bytes(),
        pd_gpus=iso.pd_gpus if device.startswith("cuda") else None)
    return ordered, eplan


def plan_run(suite: Suite, base: SideSpec, cand: SideSpec, overrides: Overrides, out: Path,
             isolation: Isolation, *, save_reference: bool = False,
             history_db: Path | None = None,
             percentiles: tuple[float, ...] | None = None) -> RunPlan:
    """The plan of a run of `suite`, every input validated (BadInput, one line, for the
    first bad one). Reads the datasets and asks the targets about the sides; starts no
    engine. `percentiles`: the summary's pNN_ chosen on the command line (checked there,
    metrics.checked_percentiles), over the suite's `percentiles`."""
    isolation.validate()
    if isolation.in_process and (base.build or cand.build):
        raise BadInput("--in-process runs engines in the harness's own environment: a side "
                       "with its own build (TARGET@BUILD:RUNNER) needs its own process")
    iso = isolation.resolved_for({base.device, cand.device})
    base, cand = (replace(s, vllm_sync_check=iso.vllm_sync_check, pd_gpus=iso.pd_gpus,
                          kv_connector=iso.kv_connector)
                  for s in (base, cand))
    targets = {s.target: get_target(s.target) for s in (base, cand)}
    if save_reference and (cand.faults or base.faults):
        raise BadInput("--save-reference stores known-good counts: it cannot run with --fault")
    targets[base.target].validate(base)
    targets[cand.target].validate(cand)
    check_out(out)
    if history_db is not None and history_db.exists():
        history.open_existing(history_db).close()      # not a history: one line, now
    workloads = _workloads(suite, overrides, targets, base, cand)
    specs = dict(baseline=base, candidate=cand)
    # what this machine cannot run is known before any engine starts: no engine for it
    # (a swept attention backend it lacks among them, so its arguments are not checked)
    not_here: dict[str, dict[str, str]] = {}
    for w in workloads:
        why = {s: r for s, sp in specs.items()
               if (r := _unsupported(targets[sp.target], sp, w.options, w.workload.needs))}
        if why:
            not_here[w.id] = why
    engine_args.check(targets, specs, [w.options for w in workloads if w.id not in not_here])
    ordered, engines = _plan_engines(workloads, specs, targets, iso, set(not_here))
    return RunPlan(suite=suite, specs=specs, targets=targets, isolation=iso,
                   workloads=tuple(workloads), ordered=tuple(ordered), not_here=not_here,
                   engines=engines, out=out, percentiles=percentiles or suite.percentiles,
                   save_reference=save_reference, history_db=history_db)
