"""`mrbench run`: every workload of a suite on the baseline and the candidate, then the gate.

Inputs are all validated (suite, workload parameters, datasets, target sides, --out) before
the first engine starts, so bad input never leaves a partial run. A side that crashes is
recorded as a failure; the other workloads still run and report.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mrbench.contract import BadInput
from mrbench.workloads import get_workload

from ..checks import history_gate
from ..checks.compare import compare
from ..checks.latency import latency_summary
from ..measure.agreement import first_divergence
from ..record import history, references
from ..record.errors import RunInterrupted
from ..record.results import RunWriter, check_out, environment
from ..record.run_record import Manifest, RunSummary, Verdict
from ..record.suite import Suite
from . import builds, engine_args, engine_plan, interrupts, progress
from .engine_bank import BankSettings, EngineBank
from .execute import InterleavedDriver, describe_failure
from .progress import Progress
from .targets.base import Footprint, SideSpec, Unsupported, get_target, side_label
from .worker import DEFAULT_CALL_TIMEOUT_S


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


def _failure(workload: str, side: str, e: Exception) -> dict:
    if isinstance(e, BadInput):
        return dict(workload=workload, side=side, error=str(e))
    error, tb = describe_failure(e)
    return dict(workload=workload, side=side, error=error, traceback=tb)


SIDES = ("baseline", "candidate")
COLD_ENGINES = ("auto", "rebuild", "keep")


@dataclass
class Isolation:
    """How sessions are hosted: each in its own engine process with a deadline per call
    (mrbench.harness.run.worker; the default), or in this process (`--in-process`: for debugging with
    a debugger or py-spy, where a crash or hang of the engine ends the run); how much of
    the GPU the engines resident at once may take together (`--gpu-memory-utilization`:
    each of them asks its engine for an equal share); and whose engine is built first
    (`--build-first`): the candidate's by default, so that a candidate that cannot start
    costs no baseline start. The other order is the control for a bias that follows build
    order rather than the runner: an A/A run should not move with it. And what becomes of
    an engine whose start compiled kernels (`--cold-engines`, harness.compile_cache):
    `rebuild` starts it again in a new process before it is measured, `keep` measures it
    as it is, `auto` (the default) rebuilds on CUDA, where a process that compiled its
    kernels was measured to run its host work slower, and keeps on CPU, where that was
    not measured and a vLLM start costs CI tens of seconds. And how many engines start
    together (`--engine-starts`, harness.engine_plan): several on a GPU, one on CPU."""

    in_process: bool = False
    timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    gpu_memory_utilization: float = 0.85
    build_first: str = "candidate"
    cold_engines: str = "auto"
    starts_at_once: int | None = None       # None: engine_plan.default_starts_at_once

    def resolved_for(self, devices: set[str]) -> "Isolation":
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


def _attach_log(fail: dict, log: Path | None) -> None:
    """A failure keeps the path of its engine's log (copied into the run directory)."""
    if log is not None and log.is_file():
        fail["engine_log"] = f"engine-logs/{log.name}"


def _interrupted(current: str | None, finished: list[str], ordered: list, failures: list,
                 prog: Progress) -> dict:
    """What an interrupt left undone, for the summary: the workload in progress fails on
    both sides (its results are lost), the ones not started are listed, and the run's
    verdict becomes "error" (an interrupted run cannot pass)."""
    during = current if current not in finished else None
    not_run = [w for w, *_ in ordered if w not in finished and w != during]
    if during:
        failures += [dict(workload=during, side=s, error="interrupted while it ran (SIGINT "
                          "or SIGTERM): its results are lost") for s in SIDES]
    prog.line(f"interrupted{f' during {during}' if during else ''}: {len(finished)} "
              f"finished, {len(not_run)} not run; writing what finished")
    return dict(during=during, finished=list(finished), not_run=not_run)


def _engine_key(target, spec: SideSpec, options) -> Any:
    """The target's engine key; a target without one (a plug-in) reuses an engine only for
    an identical side and shape."""
    fn = getattr(target, "engine_key", None)
    return fn(spec, options) if fn else (spec, options)


def _unsupported(target, spec: SideSpec, options, needs: frozenset[str]) -> str | None:
    fn = getattr(target, "unsupported", None)
    return fn(spec, options, needs) if fn else None


def _footprint(target, spec: SideSpec, options) -> Footprint | None:
    fn = getattr(target, "footprint", None)
    return fn(spec, options) if fn else None


def _plan_engines(plan: list, specs: dict[str, SideSpec], targets: dict, iso: Isolation,
                  skip: set[str]) -> tuple[list, engine_plan.EnginePlan]:
    """The workloads in run order (those sharing an engine shape back to back, stable
    otherwise) and the plan of their engines; `skip`: workloads that run on no engine."""
    def key(sp: SideSpec, o) -> Any:
        return _engine_key(targets[sp.target], sp, replace(o, gpu_memory_share=None))
    first_seen: dict[tuple, int] = {}
    rows = []
    for wid, entry, wl, params, items in plan:
        options = engine_args.shape_options(wl.engine_options(params), entry)
        keys = tuple(key(sp, options) for _, sp in sorted(specs.items()))
        first_seen.setdefault(keys, len(first_seen))
        rows.append((first_seen[keys], len(rows), (wid, entry, wl, params, items, options)))
    ordered = [x for *_, x in sorted(rows, key=lambda t: (t[0], t[1]))]
    fps: dict[tuple[str, Any], Footprint | None] = {}

    def footprint(sp: SideSpec, o) -> Footprint | None:
        k = (sp.target, key(sp, o))
        if k not in fps:
            fps[k] = _footprint(targets[sp.target], sp, o)
        return fps[k]

    device = next(iter(specs.values())).device
    eplan = engine_plan.plan(
        [(w[0], w[5]) for w in ordered if w[0] not in skip], specs, key, footprint,
        iso.gpu_memory_utilization, iso.starts_at_once or 1,
        engine_plan.device_memory_bytes(device) if device.startswith("cuda")
        else engine_plan.host_memory_bytes(), engine_plan.host_memory_bytes())
    return ordered, eplan


def run_suite(suite: Suite, base: SideSpec, cand: SideSpec,
              overrides: Overrides, out: Path, log=None,
              save_reference: bool = False,
              isolation: Isolation | None = None,
              bank: EngineBank | None = None,
              history_db: Path | None = None) -> tuple[RunSummary, int, Path]:
    """Run `suite`, write it to `out`: (summary, exit code, path). `bank`: engines lent by
    a campaign, kept resident after the run for its next one (while both sides stay
    unchanged); without one, the run's engines are closed at its end. `history_db`: also
    judge each latency ratio against the earlier passing comparable runs' there
    (harness.history_gate)."""
    iso = isolation or Isolation()
    if not 0 < iso.gpu_memory_utilization <= 0.95:
        raise BadInput(f"--gpu-memory-utilization must be in (0, 0.95], got "
                       f"{iso.gpu_memory_utilization}")
    if iso.build_first not in SIDES:
        raise BadInput(f"--build-first must be one of {', '.join(SIDES)}, got "
                       f"{iso.build_first!r}")
    if iso.cold_engines not in COLD_ENGINES:
        raise BadInput(f"--cold-engines must be one of {', '.join(COLD_ENGINES)}, got "
                       f"{iso.cold_engines!r}")
    if iso.in_process and (base.build or cand.build):
        raise BadInput("--in-process runs engines in the harness's own environment: a side "
                       "with its own build (TARGET@BUILD:RUNNER) needs its own process")
    iso = iso.resolved_for({base.device, cand.device})
    targets = {s.target: get_target(s.target) for s in (base, cand)}
    if save_reference and (cand.faults or base.faults):
        raise BadInput("--save-reference stores known-good counts: it cannot run with --fault")
    targets[base.target].validate(base)
    targets[cand.target].validate(cand)
    check_out(out)
    if history_db is not None and history_db.exists():
        history.open_existing(history_db).close()      # not a history: one line, now
    plan = []
    unused = overrides.unused([set(get_workload(e.workload).Params.model_fields)
                               for e in suite.workloads])
    if unused:
        raise BadInput(f"--{unused[0].replace('_', '-')} applies to no workload of suite "
                       f"{suite.name!r}")
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
        points = wl.points(params)
        for suffix, pp in points:           # a sweep is one entry, many engine shapes
            plan.append((f"{entry.id}.{suffix}" if suffix else entry.id, entry, wl, pp, items))
    specs = dict(baseline=base, candidate=cand)
    engine_args.check(targets, specs, [engine_args.shape_options(wl.engine_options(p), e)
                                       for _, e, wl, p, _ in plan])
    # what this machine cannot run is known before any engine starts: no engine for it
    why_not: dict[str, dict[str, str]] = {}
    for wid, entry, wl, params, _ in plan:
        options = engine_args.shape_options(wl.engine_options(params), entry)
        why = {s: r for s, sp in specs.items()
               if (r := _unsupported(targets[sp.target], sp, options, wl.needs))}
        if why:
            why_not[wid] = why
    ordered, eplan = _plan_engines(plan, specs, targets, iso, set(why_not))

    def engine_of(side: str, wid: str):
        return next(e for e in eplan.engines if e.side == side and wid in e.workloads)

    def bank_key(e) -> tuple[str, Any]:
        return (e.side, _engine_key(targets[e.spec.target], e.spec, e.options))

    writer = RunWriter(out)
    own_bank = bank is None
    bank = bank or EngineBank(iso.bank_settings())
    bank.begin_run(iso.bank_settings())
    group = None
    checks, failures, resolved, metrics = [], [], {}, {}
    unsupported: list[dict] = []
    t_start = time.time()
    saved: dict[str, dict] = {}
    finished: list[str] = []                 # workloads done (checks in), for an interrupt
    current, interrupted = None, None
    starts: dict[str, dict] = {}
    prog = Progress(len(ordered), f"mrbench {suite.name}", log)
    prog.side_names = {s: side_label(sp, specs["candidate" if s == "baseline" else "baseline"])
                       for s, sp in specs.items()}
    prog.line(f"{suite.name}: {len(ordered)} workloads, candidate "
              f"{side_label(cand, base)} vs baseline {side_label(base, cand)} on {base.device}")
    prog.line(eplan.describe())
    with progress.active(prog):
        try:
            for wid, entry, wl, params, items, options in ordered:
                prog.workload, current = wid, wid
                prog.status(wid)
                n_fail = len(failures)
                why = why_not.get(wid)
                if why:                        # not this machine's: say so, it is no failure
                    for s, r in why.items():
                        unsupported.append(dict(workload=wid, side=s, target=specs[s].target,
                                                reason=r))
                        prog.side(s, f"unsupported here: {r}")
                    prog.advance()
                    finished.append(wid)
                    continue
                if eplan.group_of(wid) != group or any(
                        bank.get(bank_key(engine_of(s, wid))) is None for s in specs):
                    group = eplan.group_of(wid)       # (again, if an engine was retired)
                    if len({e.workloads for e in eplan.groups[group].engines}) > 1:
                        # several shapes start: name the group, not this workload
                        prog.workload = f"start group {group + 1}/{len(eplan.groups)}"
                    bank.prepare(eplan.groups[group], lambda e: bank_key(e)[1], prog)
                    prog.workload = wid
                sessions, errors, logs_of = {}, {}, {}
                for s in specs:
                    k = bank_key(engine_of(s, wid))
                    if k in bank.failed:
                        errors[s] = bank.failed[k]
                    elif (r := bank.get(k)) is not None:
                        sessions[s], logs_of[s] = r.session, r.log
                        if r.served:
                            prog.side(s, "engine reused (same engine shape)")
                        r.served += 1
                        # the start of the engine that serves it, for the manifest
                        starts[s] = dict(r.start, **({} if r.run == bank.run else
                                                    dict(reused_from_run=r.run)))
                for side, e in errors.items():
                    if isinstance(e, Unsupported):
                        unsupported.append(dict(workload=wid, side=side,
                                                target=specs[side].target, reason=str(e)))
                    else:
                        failures.append(_failure(wid, side, e))
                        k = bank_key(engine_of(side, wid))
                        _attach_log(failures[-1], bank.log_of.get(k))
                if errors or len(sessions) < len(specs):  # nothing runs on one side
                    prog.advance()
                    finished.append(wid)
                    continue
                results = {}
                try:
                    prog.status(f"{wid}: {' + '.join(sessions)}")
                    results, failed = wl.run(sessions, items, params, InterleavedDriver(base.device))
                    for s, f in failed.items():
                        failures.append(dict(workload=wid, side=s, error=f.error,
                                             traceback=f.traceback))
                except Exception as e:       # the workload itself crashed: both sides fail
                    failures += [_failure(wid, s, e) for s in sessions]
                    results = {}
                for f in failures[n_fail:]:
                    _attach_log(f, logs_of.get(f["side"]))
                    # an engine that failed mid-workload is retired
                    bank.discard(bank_key(engine_of(f["side"], wid)), retire=True)
                prog.advance()
                if len(results) == 2:             # per-request agreement, for tables and plots
                    for row, b, c in zip(results["candidate"].requests,
                                         results["baseline"].tokens,
                                         results["candidate"].tokens):
                        row["first_divergence"] = first_divergence(b, c)
                        row["agrees"] = row["first_divergence"] == -1
                for side, res in results.items():
                    res.resolved = dict(res.resolved, engine_start=starts.get(side))
                    writer.add_side(wid, side, res)
                    resolved.setdefault(wid, {})[side] = res.resolved
                    metrics.setdefault(wid, {})[side] = latency_summary(res)
                    saved.setdefault(side, {})[wid] = dict(params=params.model_dump(),
                                                           profile=res.profile)
                if len(results) == 2:
                    ref = references.load(results["candidate"].resolved, wid, params.model_dump())
                    new = compare(wid, results["baseline"], results["candidate"],
                                  suite.thresholds_for(entry.id), ref)
                    checks += new
                    bad = [f"{c.metric} {c.verdict}" for c in new
                           if c.verdict in (Verdict.REGRESSION, Verdict.ERROR)]
                    prog.line(f"{wid}: {len(new)} checks" + (f"; {', '.join(bad)}" if bad
                                                              else ", no regression"))
                finished.append(wid)
        except KeyboardInterrupt:           # SIGINT, or SIGTERM (cli): keep what finished
            with interrupts.held():         # a second signal does not cut the cleanup short
                interrupted = _interrupted(current, finished, ordered, failures, prog)
                bank.kill_all()             # a host may be mid-call: no polite close
        # From here the run is written whole: a signal is recorded (interrupts.caught), and
        # the command ends with 130 once the results are committed, saying they are complete.
        with interrupts.held():
            # a campaign's next run reuses the engines it leaves resident where they were
            # started together, each in its own process; one at a time, an engine process
            # hosts one session after another and grows with each (bank.end_run)
            if own_bank or interrupted or bank.settings.starts_at_once <= 1:
                bank.close_all()
            bank.end_run()
            target_name = (base.target if base.target == cand.target
                           else f"{cand.target}~{base.target}")
            if history_db is not None and not interrupted:
                like, _ = history.record_of(
                    dict(resolved=resolved), dict(
                        target=target_name, suite=suite.name, baseline=side_label(base, cand),
                        candidate=side_label(cand, base), checks=[], metrics={}), out)
                th_of = {w: suite.thresholds_for(e.id) for w, e, *_ in plan}
                checks += history_gate.history_checks(
                    checks, like, history_db, lambda w: th_of.get(w, suite.thresholds))
            order = {w: i for i, (w, *_) in enumerate(plan)}    # report in the suite's order
            checks.sort(key=lambda c: order.get(c.workload, len(order)))
            for f in sorted(bank.used_logs):
                if f.is_file():
                    writer.add_file(f"engine-logs/{f.name}", f.read_text(errors="replace"))
            if own_bank:
                bank.shutdown()
            summary = RunSummary.build(
                checks, failures, suite=suite.name, target=target_name,
                baseline=side_label(base, cand), candidate=side_label(cand, base),
                candidate_faults=list(cand.faults), unsupported=unsupported, metrics=metrics,
                wall_s=round(time.time() - t_start, 2), interrupted=interrupted)
            prog.line(f"{suite.name}: verdict {summary.verdict} in "
                      f"{time.time() - t_start:.0f} s")
            seeds = dict(engine=dict(baseline=base.seed, candidate=cand.seed),
                         workloads={w: getattr(p, "seed", None) for w, _, _, p, _ in plan})
            manifest = Manifest(
                **environment(), suite=suite.model_dump(), target=target_name,
                isolation=asdict(iso), sides=dict(baseline=asdict(base), candidate=asdict(cand)),
                builds={s: builds.resolve(sp.build).describe() if sp.build else None
                        for s, sp in specs.items()},
                seeds=seeds,
                workloads={w: dict(workload=e.workload, entry=e.id, params=p.model_dump(),
                                   source=wl.source(p), items=len(items))
                           for w, e, wl, p, items in plan},
                engines=dict(plan=eplan.to_dict(), starts=bank.starts,
                             wall_s=round(sum(x["start_s"] for x in bank.starts), 3)),
                resolved=resolved)
            path = writer.commit(manifest, summary)
            if interrupted:
                raise RunInterrupted(summary, path)
            if save_reference and not failures:     # a side that failed has nothing to keep
                for side in ("baseline", "candidate"):
                    sha = manifest.git_sha
                    first = next(iter(saved[side]))
                    references.save(resolved[first][side],
                                    {w: dict(e, git_sha=sha) for w, e in saved[side].items()})
            return summary, summary.exit_code, path
