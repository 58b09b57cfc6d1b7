"""`mrbench run`: every workload of a suite on the baseline and the candidate, then the gate.

Inputs are all validated (suite, workload parameters, datasets, target sides, --out) before
the first engine starts, so bad input never leaves a partial run. A side that crashes is
recorded as a failure; the other workloads still run and report.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

from workloads import get_workload

from .collectors.agreement import first_divergence
from . import references
from .compare import compare, latency_summary
from .errors import EXIT_PASS, EXIT_REGRESSION, EXIT_RUN_FAILED, BadInput
from .execute import describe_failure
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


@dataclass
class Isolation:
    """How sessions are hosted: each in its own engine process with a deadline per call
    (harness.worker; the default), or in this process (`--in-process`: for debugging with
    a debugger or py-spy, where a crash or hang of the engine ends the run)."""

    in_process: bool = False
    timeout_s: float = DEFAULT_CALL_TIMEOUT_S


def _open(side: str, spec: SideSpec, options, iso: Isolation, pool: HostPool, log: Path):
    if iso.in_process:
        return get_target(spec.target).open(spec, options)
    return pool.open(side, spec.target, spec, options, log)


def _attach_log(fail: dict, log: Path) -> None:
    """A failure keeps the path of its engine's log (copied into the run directory)."""
    if log.is_file():
        fail["engine_log"] = f"engine-logs/{log.name}"


def overall_verdict(checks: list[dict], failures: list[dict]) -> tuple[str, int]:
    if failures:
        return "error", EXIT_RUN_FAILED
    if any(c["verdict"] == "regression" for c in checks):
        return "regression", EXIT_REGRESSION
    return "pass", EXIT_PASS


def run_suite(suite: Suite, base: SideSpec, cand: SideSpec,
              overrides: Overrides, out: Path, log=None,
              save_reference: bool = False,
              isolation: Isolation | None = None) -> tuple[dict, int, Path]:
    iso = isolation or Isolation()
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
        from pydantic import ValidationError
        try:
            params = wl.Params.model_validate(
                overrides.apply(entry.params, set(wl.Params.model_fields)))
        except ValidationError as e:
            err = e.errors()[0]
            raise BadInput(f"workload {entry.id!r}: {'.'.join(map(str, err['loc']))}: "
                           f"{err['msg']}") from None
        items = wl.prepare(params)
        if hasattr(wl, "check_items"):
            wl.check_items(params, items, min(targets[base.target].context_len(base),
                                              targets[cand.target].context_len(cand)))
        points = wl.points(params) if hasattr(wl, "points") else [("", params)]
        for suffix, pp in points:           # a sweep is one entry, many engine shapes
            plan.append((f"{entry.id}.{suffix}" if suffix else entry.id, entry, wl, pp, items))

    writer = RunWriter(out)
    logs = Path(tempfile.mkdtemp(prefix="mrbench-engine-logs-"))
    pool = HostPool(iso.timeout_s)
    checks, failures, resolved, metrics = [], [], {}, {}
    unsupported: list[dict] = []
    bar = tqdm(total=2 * len(plan), desc=f"mrbench {suite.name}", unit="side",
               file=log or sys.stderr,      # looked up now: the stream may have been replaced
               disable=None)
    t_start = time.time()
    saved: dict[str, dict] = {}
    for wid, entry, wl, params, items in plan:
        sessions, n_fail = {}, len(failures)
        side_logs = {s: logs / f"{wid}.{s}.log" for s in ("baseline", "candidate")}
        for side, spec in (("baseline", base), ("candidate", cand)):
            bar.set_postfix_str(f"{wid}: opening {side} ({spec.target}:{spec.runner})")
            try:
                sessions[side] = _open(side, spec, wl.engine_options(params), iso, pool,
                                       side_logs[side])
            except Unsupported as e:          # not this machine's: say so, it is no failure
                unsupported.append(dict(workload=wid, side=side, target=spec.target,
                                        reason=str(e)))
            except Exception as e:
                failures.append(_failure(wid, side, e))
        if any(u["workload"] == wid for u in unsupported):
            for sess in sessions.values():
                sess.close()
            sessions = {}
        results = {}
        try:
            if sessions:
                bar.set_postfix_str(f"{wid}: {' + '.join(sessions)}")
                results, failed = wl.run(sessions, items, params, base.device)
                failures += [dict(workload=wid, side=s, error=f.error,
                                  traceback=f.traceback) for s, f in failed.items()]
        except Exception as e:       # the workload itself crashed: both sides fail
            failures += [_failure(wid, s, e) for s in sessions]
            results = {}
        finally:
            for sess in sessions.values():
                sess.close()
        for f in failures[n_fail:]:
            _attach_log(f, side_logs[f["side"]])
        bar.update(2)
        if len(results) == 2:                # per-request agreement, for tables and plots
            for row, b, c in zip(results["candidate"].requests, results["baseline"].tokens,
                                 results["candidate"].tokens):
                row["first_divergence"] = first_divergence(b, c)
                row["agrees"] = row["first_divergence"] == -1
        for side, res in results.items():
            writer.add_side(wid, side, res)
            resolved.setdefault(wid, {})[side] = res.resolved
            metrics.setdefault(wid, {})[side] = latency_summary(res)
            saved.setdefault(side, {})[wid] = dict(params=params.model_dump(), profile=res.profile)
        if len(results) == 2:
            ref = references.load(results["candidate"].resolved, wid, params.model_dump())
            checks += [c.to_dict() for c in compare(wid, results["baseline"],
                                                    results["candidate"],
                                                    suite.thresholds_for(entry.id), ref)]
    bar.close()
    pool.shutdown()
    for f in sorted(logs.iterdir()):
        writer.add_file(f"engine-logs/{f.name}", f.read_text(errors="replace"))
    shutil.rmtree(logs, ignore_errors=True)
    verdict, code = overall_verdict(checks, failures)
    target_name = base.target if base.target == cand.target else f"{cand.target}~{base.target}"
    summary = dict(verdict=verdict, suite=suite.name, target=target_name,
                   baseline=side_label(base, cand), candidate=side_label(cand, base),
                   candidate_faults=list(cand.faults), checks=checks, failures=failures,
                   unsupported=unsupported,
                   metrics=metrics, wall_s=round(time.time() - t_start, 2))
    manifest = dict(environment(), suite=suite.model_dump(), target=target_name,
                    isolation=asdict(iso),
                    sides=dict(baseline=asdict(base), candidate=asdict(cand)),
                    seeds=dict(engine=dict(baseline=base.seed, candidate=cand.seed),
                               workloads={w: getattr(p, "seed", None) for w, _, _, p, _ in plan}),
                    workloads={w: dict(workload=e.workload, entry=e.id, params=p.model_dump(),
                                       source=getattr(wl, "source", lambda _: None)(p),
                                       items=len(items)) for w, e, wl, p, items in plan},
                    resolved=resolved)
    path = writer.commit(manifest, summary)
    if save_reference and not failures:     # a side that failed has nothing to keep
        for side in ("baseline", "candidate"):
            sha = manifest.get("git_sha")
            first = next(iter(saved[side]))
            references.save(resolved[first][side],
                            {w: dict(e, git_sha=sha) for w, e in saved[side].items()})
    return summary, code, path
