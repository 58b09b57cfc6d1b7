"""`mrbench run`: every workload of a suite on the baseline and the candidate, then the gate.

Inputs are all validated (suite, workload parameters, datasets, target sides, --out) before
the first engine starts, so bad input never leaves a partial run. A side that crashes is
recorded as a failure; the other workloads still run and report.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mrbench.contract import BadInput
from mrbench.workloads import get_workload

from . import builds, interrupts, progress, references
from .collectors.agreement import first_divergence
from .compare import compare, latency_summary
from .compile_cache import counting_writes, describe
from .errors import EXIT_PASS, EXIT_REGRESSION, EXIT_RUN_FAILED, RunInterrupted
from .execute import InterleavedDriver, describe_failure
from .progress import Progress
from .results import RunWriter, check_out, environment
from .suite import Suite
from .targets.base import SideSpec, Unsupported, get_target, side_label
from .worker import DEFAULT_CALL_TIMEOUT_S, HostPool


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
    (mrbench.harness.worker; the default), or in this process (`--in-process`: for debugging with
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
    not measured and a vLLM start costs CI tens of seconds."""

    in_process: bool = False
    timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    gpu_memory_utilization: float = 0.85
    build_first: str = "candidate"
    cold_engines: str = "auto"

    def resolved_for(self, devices: set[str]) -> "Isolation":
        """This isolation with `cold_engines` "auto" decided for the sides' devices."""
        if self.cold_engines != "auto":
            return self
        cuda = any(d.startswith("cuda") for d in devices)
        return replace(self, cold_engines="rebuild" if cuda else "keep")

    @property
    def open_order(self) -> tuple[str, ...]:
        """The sides in the order their engines are built."""
        return (self.build_first,) + tuple(s for s in SIDES if s != self.build_first)


def _attach_log(fail: dict, log: Path | None) -> None:
    """A failure keeps the path of its engine's log (copied into the run directory)."""
    if log is not None and log.is_file():
        fail["engine_log"] = f"engine-logs/{log.name}"


class SessionCache:
    """The sessions open now, one per side, each with the engine key it was opened for.
    A workload whose engine shape gives the same key reuses them (a vLLM engine start is
    tens of seconds); a different key closes the old ones first (their GPU memory must be
    free before the new engines ask for theirs)."""

    def __init__(self, iso: Isolation, pool: HostPool) -> None:
        self.iso, self.pool = iso, pool
        self.open: dict[str, tuple[Any, Any, Path]] = {}     # side -> (key, session, log)
        # side -> how its open session's engine started: what the start wrote to the
        # kernel-compile caches, its process, and the start it replaced if it was rebuilt
        self.starts: dict[str, dict] = {}
        # False once a rebuilt engine's start wrote to the caches again (a cache that does
        # not keep, or a tool that writes at every start): rebuilding then buys nothing
        self.rebuild_helps = True

    def log(self, side: str) -> Path | None:
        return self.open[side][2] if side in self.open else None

    def discard(self, side: str) -> None:
        if side in self.open:
            _, sess, _ = self.open.pop(side)
            try:
                sess.close()
            except Exception:          # a broken engine is retired either way
                pass

    def close_all(self) -> None:
        for side in list(self.open):
            self.discard(side)

    def abandon_all(self) -> None:
        """Forget the sessions without closing them: after an interrupt their engines were
        killed with the pool (HostPool.kill_all), and a close would wait on a dead pipe."""
        self.open.clear()

    def acquire(self, wanted: dict[str, tuple[Any, SideSpec, Any, Path]], prog
                ) -> tuple[dict[str, Any], dict[str, Exception]]:
        """{side: (key, spec, options, log)} -> (sessions, {side: exception})."""
        for side in list(self.open):
            if side not in wanted or self.open[side][0] != wanted[side][0]:
                self.discard(side)
        sessions, errors = {}, {}
        for side in self.iso.open_order:
            if side not in wanted:
                continue
            key, spec, options, log = wanted[side]
            if side in self.open:
                sessions[side] = self.open[side][1]
                prog.side(side, "engine reused (same engine shape)")
                continue
            prog.side(side, "starting engine")
            t0 = time.perf_counter()
            try:
                sess, start = self._start(side, spec, options, log)
                if (start["compile_cache_writes"] and self.iso.cold_engines == "rebuild"
                        and self.rebuild_helps):
                    sess, start = self._rebuild(side, sess, start, spec, options, log, prog,
                                                time.perf_counter() - t0)
            except Exception as e:
                errors[side] = e
                prog.side(side, f"engine did not start after {time.perf_counter() - t0:.1f} s")
                if isinstance(e, Unsupported):
                    break                 # the workload is skipped: open nothing more
                continue
            prog.side(side, f"engine ready in {time.perf_counter() - t0:.1f} s")
            self.open[side] = (key, sess, log)
            self.starts[side] = start
            sessions[side] = sess
        return sessions, errors

    def _start(self, side: str, spec: SideSpec, options: Any, log: Path) -> tuple[Any, dict]:
        """Open one side's engine: (session, how it started)."""
        if self.iso.in_process:
            sess, writes = counting_writes(lambda: get_target(spec.target).open(spec, options))
            return sess, dict(compile_cache_writes=writes, pid=os.getpid())
        sess = self.pool.open(side, spec.target, spec, options, log)
        return sess, dict(compile_cache_writes=sess.compile_cache_writes, pid=sess.pid,
                          python=sess.python)

    def _rebuild(self, side: str, sess: Any, start: dict, spec: SideSpec, options: Any,
                 log: Path, prog: Progress, took_s: float) -> tuple[Any, dict]:
        """An engine whose start compiled kernels, started again in a new process that
        loads them from the cache (harness.compile_cache says why). Once: a start that
        still writes is measured as it is, recorded, and ends rebuilding for this run."""
        first = dict(start, start_s=round(took_s, 3))
        if self.iso.in_process:
            prog.side(side, f"engine compiled kernels as it started "
                      f"({describe(first['compile_cache_writes'])}); measured as it is "
                      "(--in-process has no other process to start it in)")
            return sess, dict(start, not_rebuilt="--in-process")
        prog.side(side, f"engine compiled kernels as it started "
                  f"({describe(first['compile_cache_writes'])}, {took_s:.1f} s): starting it "
                  "again in a new process, to measure it with its kernels loaded from the cache")
        try:
            sess.close()
        finally:
            self.pool.retire(side)
        sess, again = self._start(side, spec, options, log)
        if again["compile_cache_writes"]:
            self.rebuild_helps = False
            prog.side(side, f"its new start wrote again "
                      f"({describe(again['compile_cache_writes'])}): measured as it is; no "
                      "more rebuilds in this run")
        return sess, dict(again, rebuilt_after=first)


def overall_verdict(checks: list[dict], failures: list[dict]) -> tuple[str, int]:
    """A failed side, or a check that could not measure what it gates ("not measured"),
    is an error (exit 3): never a pass."""
    if failures or any(c["verdict"] == "error" for c in checks):
        return "error", EXIT_RUN_FAILED
    if any(c["verdict"] == "regression" for c in checks):
        return "regression", EXIT_REGRESSION
    return "pass", EXIT_PASS


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


def _engine_plan(plan: list, sides: dict[str, SideSpec], targets: dict, iso: Isolation) -> list:
    """Each plan entry with its engine options (memory share set) and engine keys, in an
    order that runs workloads sharing an engine shape back to back (stable otherwise)."""
    share = iso.gpu_memory_utilization / len(sides)   # every side's engine is resident
    out, first_seen = [], {}
    for wid, entry, wl, params, items in plan:
        options = replace(wl.engine_options(params), gpu_memory_share=share)
        keys = tuple(_engine_key(targets[spec.target], spec, options)
                     for _, spec in sorted(sides.items()))
        first_seen.setdefault(keys, len(first_seen))
        out.append((first_seen[keys], len(out), (wid, entry, wl, params, items, options)))
    return [x for *_, x in sorted(out, key=lambda t: (t[0], t[1]))]


def run_suite(suite: Suite, base: SideSpec, cand: SideSpec,
              overrides: Overrides, out: Path, log=None,
              save_reference: bool = False,
              isolation: Isolation | None = None) -> tuple[dict, int, Path]:
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
    ordered = _engine_plan(plan, specs, targets, iso)

    writer = RunWriter(out)
    logs = Path(tempfile.mkdtemp(prefix="mrbench-engine-logs-"))
    pool = HostPool(iso.timeout_s)
    cache = SessionCache(iso, pool)
    checks, failures, resolved, metrics = [], [], {}, {}
    unsupported: list[dict] = []
    t_start = time.time()
    saved: dict[str, dict] = {}
    finished: list[str] = []                 # workloads done (checks in), for an interrupt
    current, interrupted = None, None
    prog = Progress(len(ordered), f"mrbench {suite.name}", log)
    prog.side_names = {s: side_label(sp, specs["candidate" if s == "baseline" else "baseline"])
                       for s, sp in specs.items()}
    prog.line(f"{suite.name}: {len(ordered)} workloads, candidate "
              f"{side_label(cand, base)} vs baseline {side_label(base, cand)} on {base.device}")
    with progress.active(prog):
        try:
            for wid, entry, wl, params, items, options in ordered:
                prog.workload, current = wid, wid
                prog.status(wid)
                n_fail = len(failures)
                why = {s: r for s, sp in specs.items()
                       if (r := _unsupported(targets[sp.target], sp, options, wl.needs))}
                if why:                        # not this machine's: say so, it is no failure
                    for s, r in why.items():
                        unsupported.append(dict(workload=wid, side=s, target=specs[s].target,
                                                reason=r))
                        prog.side(s, f"unsupported here: {r}")
                    prog.advance()
                    finished.append(wid)
                    continue
                wanted = {s: (_engine_key(targets[sp.target], sp, options), sp, options,
                              logs / f"{wid}.{s}.log") for s, sp in specs.items()}
                sessions, errors = cache.acquire(wanted, prog)
                for side, e in errors.items():
                    if isinstance(e, Unsupported):
                        unsupported.append(dict(workload=wid, side=side,
                                                target=specs[side].target, reason=str(e)))
                    else:
                        failures.append(_failure(wid, side, e))
                        _attach_log(failures[-1], wanted[side][3])
                if errors:                     # nothing runs on one side: keep the engines
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
                    _attach_log(f, cache.log(f["side"]))
                    cache.discard(f["side"])     # an engine that failed mid-workload is retired
                prog.advance()
                if len(results) == 2:             # per-request agreement, for tables and plots
                    for row, b, c in zip(results["candidate"].requests,
                                         results["baseline"].tokens,
                                         results["candidate"].tokens):
                        row["first_divergence"] = first_divergence(b, c)
                        row["agrees"] = row["first_divergence"] == -1
                for side, res in results.items():
                    res.resolved = dict(res.resolved, engine_start=cache.starts.get(side))
                    writer.add_side(wid, side, res)
                    resolved.setdefault(wid, {})[side] = res.resolved
                    metrics.setdefault(wid, {})[side] = latency_summary(res)
                    saved.setdefault(side, {})[wid] = dict(params=params.model_dump(),
                                                           profile=res.profile)
                if len(results) == 2:
                    ref = references.load(results["candidate"].resolved, wid, params.model_dump())
                    new = [c.to_dict() for c in compare(wid, results["baseline"],
                                                        results["candidate"],
                                                        suite.thresholds_for(entry.id), ref)]
                    checks += new
                    bad = [f"{c['metric']} {c['verdict']}" for c in new
                           if c["verdict"] in ("regression", "error")]
                    prog.line(f"{wid}: {len(new)} checks" + (f"; {', '.join(bad)}" if bad
                                                              else ", no regression"))
                finished.append(wid)
        except KeyboardInterrupt:           # SIGINT, or SIGTERM (cli): keep what finished
            with interrupts.held():         # a second signal does not cut the cleanup short
                interrupted = _interrupted(current, finished, ordered, failures, prog)
                pool.kill_all()             # a host may be mid-call: no polite close
                cache.abandon_all()
        # From here the run is written whole: a signal is recorded (interrupts.caught), and
        # the command ends with 130 once the results are committed, saying they are complete.
        with interrupts.held():
            cache.close_all()
            pool.shutdown()
            order = {w: i for i, (w, *_) in enumerate(plan)}    # report in the suite's order
            checks.sort(key=lambda c: order.get(c["workload"], len(order)))
            for f in sorted(logs.iterdir()):
                writer.add_file(f"engine-logs/{f.name}", f.read_text(errors="replace"))
            shutil.rmtree(logs, ignore_errors=True)
            verdict, code = overall_verdict(checks, failures)
            prog.line(f"{suite.name}: verdict {verdict} in {time.time() - t_start:.0f} s")
            target_name = (base.target if base.target == cand.target
                           else f"{cand.target}~{base.target}")
            summary = dict(verdict=verdict, suite=suite.name, target=target_name,
                           baseline=side_label(base, cand), candidate=side_label(cand, base),
                           candidate_faults=list(cand.faults), checks=checks, failures=failures,
                           unsupported=unsupported,
                           metrics=metrics, wall_s=round(time.time() - t_start, 2))
            if interrupted:
                summary["interrupted"] = interrupted
            seeds = dict(engine=dict(baseline=base.seed, candidate=cand.seed),
                         workloads={w: getattr(p, "seed", None) for w, _, _, p, _ in plan})
            manifest = dict(environment(), suite=suite.model_dump(), target=target_name,
                            isolation=asdict(iso),
                            sides=dict(baseline=asdict(base), candidate=asdict(cand)),
                            builds={s: builds.resolve(sp.build).describe() if sp.build else None
                                    for s, sp in specs.items()},
                            seeds=seeds,
                            workloads={w: dict(workload=e.workload, entry=e.id,
                                               params=p.model_dump(), source=wl.source(p),
                                               items=len(items))
                                       for w, e, wl, p, items in plan},
                            resolved=resolved)
            path = writer.commit(manifest, summary)
            if interrupted:
                raise RunInterrupted(summary, path)
            if save_reference and not failures:     # a side that failed has nothing to keep
                for side in ("baseline", "candidate"):
                    sha = manifest.get("git_sha")
                    first = next(iter(saved[side]))
                    references.save(resolved[first][side],
                                    {w: dict(e, git_sha=sha) for w, e in saved[side].items()})
            return summary, code, path
