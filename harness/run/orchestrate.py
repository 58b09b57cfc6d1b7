"""`mrbench run`: every workload of a suite on the baseline and the candidate, then the gate.

Three stages, each handing the next a typed value:

- `plan_run` (run_plan.py) validates every input and decides the run before an engine
  starts: a `RunPlan`. Bad input never leaves a partial run.
- `execute` starts the plan's engines and runs its workloads, handing each finished
  workload (`WorkloadRun`) to the recorder as it ends, and returns what else the run left:
  `Executed` (failures, what this machine could not run, an interrupt). A side that crashes
  is recorded as a failure; the other workloads still run and report.
- `Recorder` records: `add` puts each workload's rows into the run's tables and judges it
  as it finishes (so no workload's results are held to the end of the run); once
  `release_engines` has closed what the run need not keep, `record` builds the summary
  (`RunSummary.build`) and the manifest and writes the run whole through the one writer
  (`RunWriter.commit`).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from mrbench.contract import BadInput, SideResult

from ..checks import history_gate
from ..checks.compare import compare
from ..checks.latency import latency_summary
from ..measure.agreement import first_divergence
from ..record import history, references
from ..record.errors import RunInterrupted
from ..record.results import RunWriter, environment
from ..record.run_record import Check, Manifest, RunSummary, Verdict
from ..record.suite import Suite
from . import builds, interrupts, models, progress
from .engines.bank import EngineBank
from .execute import InterleavedDriver, describe_failure
from .progress import Progress
from .run_plan import SIDES, Isolation, Overrides, PlannedWorkload, RunPlan, plan_run
from .targets.base import SideSpec, Unsupported


@dataclass
class WorkloadRun:
    """One finished workload, from execute to the recorder: each side's results (none for
    a side that failed) and the start record of the engine that served each side."""

    planned: PlannedWorkload
    results: dict[str, SideResult]
    starts: dict[str, dict]


@dataclass
class Executed:
    """What executing a plan left besides the workloads' results: the failed sides, the
    sides this machine could not run, and what an interrupt left undone (None: none)."""

    t_start: float
    failures: list[dict] = field(default_factory=list)
    unsupported: list[dict] = field(default_factory=list)
    interrupted: dict | None = None


@dataclass(frozen=True)
class EnginesUsed:
    """The run's engines as its record keeps them: every start, and each engine's log
    (read before an own bank's shutdown removes the files)."""

    starts: list[dict]
    logs: dict[str, str]          # {path in the run directory: text}
    preloads: list[dict] = field(default_factory=list)   # harness.run.engines.preload's processes


def _failure(workload: str, side: str, e: Exception) -> dict:
    if isinstance(e, BadInput):
        return dict(workload=workload, side=side, error=str(e))
    error, tb = describe_failure(e)
    return dict(workload=workload, side=side, error=error, traceback=tb)


def _attach_log(fail: dict, log: Path | None) -> None:
    """A failure keeps the path of its engine's log (copied into the run directory)."""
    if log is not None and log.is_file():
        fail["engine_log"] = f"engine-logs/{log.name}"


def _interrupted(current: str | None, finished: list[str], ordered: tuple[PlannedWorkload, ...],
                 failures: list, prog: Progress) -> dict:
    """What an interrupt left undone, for the summary: the workload in progress fails on
    both sides (its results are lost), the ones not started are listed, and the run's
    verdict becomes "error" (an interrupted run cannot pass)."""
    during = current if current not in finished else None
    not_run = [w.id for w in ordered if w.id not in finished and w.id != during]
    if during:
        failures += [dict(workload=during, side=s, error="interrupted while it ran (SIGINT "
                          "or SIGTERM): its results are lost") for s in SIDES]
    prog.line(f"interrupted{f' during {during}' if during else ''}: {len(finished)} "
              f"finished, {len(not_run)} not run; writing what finished")
    return dict(during=during, finished=list(finished), not_run=not_run)


def _sessions(plan: RunPlan, bank: EngineBank, wid: str, prog: Progress
              ) -> tuple[dict[str, Any], dict[str, Exception], dict[str, Path], dict[str, dict]]:
    """Each side's resident session for `wid`, or the error its engine's start gave:
    (sessions, errors, engine logs, engine starts), by side."""
    sessions, errors, logs_of, starts = {}, {}, {}, {}
    for s in plan.specs:
        k = plan.bank_key(plan.engine_of(s, wid))
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
    return sessions, errors, logs_of, starts


def _fresh_pair(plan: RunPlan, bank: EngineBank, wid: str, group: int, prog: Progress,
                logs_of: dict[str, Path]) -> Callable[[], dict[str, Any]]:
    """What the driver calls to measure `wid` on a new pair of engines (a suite entry's
    `engine_pairs`): both sides' engines for it are closed with their processes, and the
    start group started again, so the new pair starts as the first did (together, rebuilt
    where a start compiled). Raises the first side's start error."""
    def fresh() -> dict[str, Any]:
        bank.discard(*[plan.bank_key(plan.engine_of(s, wid)) for s in plan.specs],
                     retire=True)
        bank.prepare(plan.engines.groups[group], lambda e: plan.bank_key(e)[1], prog)
        sessions, errors, logs, _ = _sessions(plan, bank, wid, prog)
        if errors:
            raise next(iter(errors.values()))
        logs_of.update(logs)
        return sessions
    return fresh


def execute(plan: RunPlan, bank: EngineBank, prog: Progress,
            finished_one: Callable[[WorkloadRun], None]) -> Executed:
    """Run the plan's workloads in its order, starting each start group's engines in
    `bank` as the run reaches it (again where an engine was retired), and hand each
    workload that ran to `finished_one` as it ends. A SIGINT or SIGTERM ends the loop:
    the engines are killed and what finished is kept. The bank's engines stay resident."""
    ex = Executed(t_start=time.time())
    failures = ex.failures
    finished: list[str] = []                 # workloads done (checks in), for an interrupt
    current, group = None, None
    with progress.active(prog):
        try:
            for w in plan.ordered:
                wid = w.id
                prog.workload, current = wid, wid
                prog.status(wid)
                n_fail = len(failures)
                why = plan.not_here.get(wid)
                if why:                        # not this machine's: say so, it is no failure
                    for s, r in why.items():
                        ex.unsupported.append(dict(workload=wid, side=s,
                                                   target=plan.specs[s].target, reason=r))
                        prog.side(s, f"unsupported here: {r}")
                    prog.advance()
                    finished.append(wid)
                    continue
                if plan.engines.group_of(wid) != group or any(
                        bank.get(plan.bank_key(plan.engine_of(s, wid))) is None
                        for s in plan.specs):
                    group = plan.engines.group_of(wid)   # (again, if an engine was retired)
                    groups = plan.engines.groups
                    if len({e.workloads for e in groups[group].engines}) > 1:
                        # several shapes start: name the group, not this workload
                        prog.workload = f"start group {group + 1}/{len(groups)}"
                    bank.prepare(groups[group], lambda e: plan.bank_key(e)[1], prog)
                    prog.workload = wid
                sessions, errors, logs_of, starts = _sessions(plan, bank, wid, prog)
                for side, e in errors.items():
                    if isinstance(e, Unsupported):
                        ex.unsupported.append(dict(workload=wid, side=side,
                                                   target=plan.specs[side].target,
                                                   reason=str(e)))
                    else:
                        failures.append(_failure(wid, side, e))
                        k = plan.bank_key(plan.engine_of(side, wid))
                        _attach_log(failures[-1], bank.log_of.get(k))
                if errors or len(sessions) < len(plan.specs):  # nothing runs on one side
                    prog.advance()
                    finished.append(wid)
                    continue
                results = {}
                try:
                    prog.status(f"{wid}: {' + '.join(sessions)}")
                    driver = InterleavedDriver(plan.base.device, w.entry.engine_pairs,
                                               _fresh_pair(plan, bank, wid, group, prog,
                                                           logs_of))
                    results, failed = w.workload.run(sessions, w.items, w.params, driver)
                    for s, f in failed.items():
                        failures.append(dict(workload=wid, side=s, error=f.error,
                                             traceback=f.traceback))
                except Exception as e:       # the workload itself crashed: both sides fail
                    failures += [_failure(wid, s, e) for s in sessions]
                    results = {}
                for f in failures[n_fail:]:
                    _attach_log(f, logs_of.get(f["side"]))
                    # an engine that failed mid-workload is retired
                    bank.discard(plan.bank_key(plan.engine_of(f["side"], wid)), retire=True)
                prog.advance()
                finished_one(WorkloadRun(w, results, starts))
                finished.append(wid)
        except KeyboardInterrupt:           # SIGINT, or SIGTERM (cli): keep what finished
            with interrupts.held():         # a second signal does not cut the cleanup short
                ex.interrupted = _interrupted(current, finished, plan.ordered, failures, prog)
                bank.kill_all()             # a host may be mid-call: no polite close
    return ex


def release_engines(bank: EngineBank, own_bank: bool, executed: Executed,
                    prog: Progress | None = None) -> EnginesUsed:
    """End the run's use of `bank`, keeping what the record needs of its engines. A
    campaign's next run reuses the engines it leaves resident where they were started
    together, each in its own process; one at a time, an engine process hosts one session
    after another and grows with each (bank.end_run). A bank the run made is shut down.
    The time the closes took goes to the progress log (a vLLM engine takes seconds)."""
    if own_bank or executed.interrupted or bank.settings.starts_at_once <= 1:
        n, t0 = len(bank.resident), time.monotonic()
        bank.close_all()
        if n and prog is not None:
            prog.line(f"closed {n} engine{'s' * (n > 1)} in {time.monotonic() - t0:.1f} s")
    bank.end_run()
    logs = {f"engine-logs/{f.name}": f.read_text(errors="replace")
            for f in sorted(bank.used_logs) if f.is_file()}
    if own_bank:
        bank.shutdown()
    return EnginesUsed(starts=bank.starts, logs=logs,
                       preloads=[p.describe() for p in bank.preloads.values()])


class Recorder:
    """The record stage. `add` takes each finished workload as execute hands it over:
    the per-request agreement goes into its rows, its sides go into the run's tables
    (held by the writer until commit; the results themselves are let go), its pair is
    judged. `record` then judges across runs, builds the summary and the manifest and
    commits the run directory whole."""

    def __init__(self, plan: RunPlan, prog: Progress) -> None:
        self.plan, self.prog = plan, prog
        self.writer = RunWriter(plan.out)
        self.checks: list[Check] = []
        self.resolved: dict[str, dict[str, dict]] = {}      # {workload: {side: resolved}}
        self.metrics: dict[str, dict[str, dict]] = {}       # {workload: {side: latency}}
        self.saved: dict[str, dict[str, dict]] = {}         # {side: {workload: reference}}

    def add(self, done: WorkloadRun) -> None:
        """One finished workload into the record, judged where both sides ran."""
        wid, params, results = done.planned.id, done.planned.params, done.results
        if len(results) == 2:             # per-request agreement, for tables and plots
            for row, b, c in zip(results["candidate"].requests, results["baseline"].tokens,
                                 results["candidate"].tokens):
                row["first_divergence"] = first_divergence(b, c)
                row["agrees"] = row["first_divergence"] == -1
        for side, res in results.items():
            res.resolved = dict(res.resolved, engine_start=done.starts.get(side))
            self.writer.add_side(wid, side, res)
            self.resolved.setdefault(wid, {})[side] = res.resolved
            self.metrics.setdefault(wid, {})[side] = latency_summary(res,
                                                                     self.plan.percentiles)
            self.saved.setdefault(side, {})[wid] = dict(params=params.model_dump(),
                                                        profile=res.profile)
        if len(results) == 2:
            ref = references.load(results["candidate"].resolved, wid, params.model_dump())
            new = compare(wid, results["baseline"], results["candidate"],
                          self.plan.suite.thresholds_for(done.planned.entry.id), ref)
            self.checks += new
            bad = [f"{c.metric} {c.verdict}" for c in new
                   if c.verdict in (Verdict.REGRESSION, Verdict.ERROR)]
            self.prog.line(f"{wid}: {len(new)} checks" + (f"; {', '.join(bad)}" if bad
                                                           else ", no regression"))

    def _history_checks(self) -> list[Check]:
        """Each latency ratio judged against the earlier passing comparable runs in the
        plan's history database (harness.history_gate)."""
        plan, suite = self.plan, self.plan.suite
        like, _ = history.record_of(
            dict(resolved=self.resolved), dict(
                target=plan.target_name, suite=suite.name, baseline=plan.label("baseline"),
                candidate=plan.label("candidate"), checks=[], metrics={}), plan.out)
        th_of = {w.id: suite.thresholds_for(w.entry.id) for w in plan.workloads}
        return history_gate.history_checks(self.checks, like, plan.history_db,
                                           lambda w: th_of.get(w, suite.thresholds))

    def _manifest(self, engines: EnginesUsed) -> Manifest:
        plan = self.plan
        seeds = dict(engine=dict(baseline=plan.base.seed, candidate=plan.cand.seed),
                     workloads={w.id: getattr(w.params, "seed", None) for w in plan.workloads})
        return Manifest(
            **environment(), suite=plan.suite.model_dump(), target=plan.target_name,
            isolation=asdict(plan.isolation),
            sides={s: asdict(sp) for s, sp in plan.specs.items()},
            builds={s: builds.resolve(sp.build).describe() if sp.build else None
                    for s, sp in plan.specs.items()},
            models={s: models.describe(sp.model)
                    for s, sp in plan.specs.items()},
            seeds=seeds,
            workloads={w.id: dict(workload=w.entry.workload, entry=w.entry.id,
                                  params=w.params.model_dump(),
                                  source=w.workload.source(w.params), items=len(w.items))
                       for w in plan.workloads},
            engines=dict(plan=plan.engines.to_dict(), starts=engines.starts,
                         preloads=engines.preloads,
                         wall_s=round(sum(x["start_s"] for x in engines.starts), 3)),
            resolved=self.resolved, percentiles=list(plan.percentiles))

    def record(self, executed: Executed, engines: EnginesUsed) -> tuple[RunSummary, Path]:
        """Write the run to the plan's `out`: (summary, path). An interrupted run is
        written, then RunInterrupted raised; a run that asked to save the references
        saves them once no side failed (a failed side has nothing to keep)."""
        plan = self.plan
        if plan.history_db is not None and not executed.interrupted:
            self.checks += self._history_checks()
        order = {w.id: i for i, w in enumerate(plan.workloads)}   # the suite's order
        self.checks.sort(key=lambda c: order.get(c.workload, len(order)))
        for rel, text in engines.logs.items():
            self.writer.add_file(rel, text)
        summary = RunSummary.build(
            self.checks, executed.failures, suite=plan.suite.name, target=plan.target_name,
            baseline=plan.label("baseline"), candidate=plan.label("candidate"),
            candidate_faults=list(plan.cand.faults), unsupported=executed.unsupported,
            metrics=self.metrics, wall_s=round(time.time() - executed.t_start, 2),
            interrupted=executed.interrupted)
        self.prog.line(f"{plan.suite.name}: verdict {summary.verdict} in "
                       f"{time.time() - executed.t_start:.0f} s")
        manifest = self._manifest(engines)
        path = self.writer.commit(manifest, summary)
        if executed.interrupted:
            raise RunInterrupted(summary, path)
        if plan.save_reference and not executed.failures:
            for side in SIDES:
                first = next(iter(self.saved[side]))
                references.save(self.resolved[first][side],
                                {w: dict(e, git_sha=manifest.git_sha)
                                 for w, e in self.saved[side].items()})
        return summary, path


def run_suite(suite: Suite, base: SideSpec, cand: SideSpec,
              overrides: Overrides, out: Path, log: IO[str] | None = None,
              save_reference: bool = False,
              isolation: Isolation | None = None,
              bank: EngineBank | None = None,
              history_db: Path | None = None,
              percentiles: tuple[float, ...] | None = None) -> tuple[RunSummary, int, Path]:
    """Run `suite`, write it to `out`: (summary, exit code, path). `bank`: engines lent by
    a campaign, kept resident after the run for its next one (while both sides stay
    unchanged); without one, the run's engines are closed at its end. `history_db`: also
    judge each latency ratio against the earlier passing comparable runs' there
    (harness.history_gate). `percentiles`: the summary's pNN_ (--percentiles; None: the
    suite's)."""
    plan = plan_run(suite, base, cand, overrides, out, isolation or Isolation(),
                    save_reference=save_reference, history_db=history_db,
                    percentiles=percentiles)
    own_bank = bank is None
    bank = bank or EngineBank(plan.isolation.bank_settings())
    bank.begin_run(plan.isolation.bank_settings())
    prog = Progress(len(plan.ordered), f"mrbench {suite.name}", log)
    prog.side_names = {s: plan.label(s) for s in plan.specs}
    prog.line(f"{suite.name}: {len(plan.ordered)} workloads, candidate "
              f"{plan.label('candidate')} vs baseline {plan.label('baseline')} on "
              f"{base.device}")
    prog.line(plan.engines.describe())
    recorder = Recorder(plan, prog)
    executed = execute(plan, bank, prog, recorder.add)
    # From here the run is written whole: a signal is recorded (interrupts.caught), and
    # the command ends with 130 once the results are committed, saying they are complete.
    with interrupts.held():
        summary, path = recorder.record(executed, release_engines(bank, own_bank, executed, prog))
        return summary, summary.exit_code, path
