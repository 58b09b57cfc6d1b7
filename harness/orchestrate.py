"""`mrbench run`: every workload of a suite on the baseline and the candidate, then the gate.

Inputs are all validated (suite, workload parameters, datasets, target sides, --out) before
the first engine starts, so bad input never leaves a partial run. A side that crashes is
recorded as a failure; the other workloads still run and report.
"""
from __future__ import annotations

import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

from workloads import get_workload

from .collectors.agreement import first_divergence
from .compare import compare, latency_summary
from .errors import EXIT_PASS, EXIT_REGRESSION, EXIT_RUN_FAILED, BadInput
from .results import RunWriter, check_out, environment
from .suite import Suite
from .targets.base import SideSpec, get_target


@dataclass
class Overrides:
    """CLI values that override every workload's parameters where the workload has them."""

    seed: int | None = None
    limit: int | None = None
    dataset: str | None = None

    def apply(self, params: dict, fields: set[str]) -> dict:
        out = dict(params)
        for k, v in asdict(self).items():
            if v is not None and k in fields:
                out[k] = v
        return out


def overall_verdict(checks: list[dict], failures: list[dict]) -> tuple[str, int]:
    if failures:
        return "error", EXIT_RUN_FAILED
    if any(c["verdict"] == "regression" for c in checks):
        return "regression", EXIT_REGRESSION
    return "pass", EXIT_PASS


def run_suite(suite: Suite, target_name: str, base: SideSpec, cand: SideSpec,
              overrides: Overrides, out: Path, log=None) -> tuple[dict, int, Path]:
    target = get_target(target_name)
    target.validate(base)
    target.validate(cand)
    check_out(out)
    plan = []
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
        plan.append((entry, wl, params, wl.prepare(params)))

    writer = RunWriter(out)
    checks, failures, resolved, metrics = [], [], {}, {}
    bar = tqdm(total=2 * len(plan), desc=f"mrbench {suite.name}", unit="side",
               file=log or sys.stderr,      # looked up now: the stream may have been replaced
               disable=None)
    t_start = time.time()
    for entry, wl, params, items in plan:
        results = {}
        for side, spec in (("baseline", base), ("candidate", cand)):
            bar.set_postfix_str(f"{entry.id}: {side} ({spec.runner})")
            try:
                session = target.open(spec, wl.engine_options(params))
                try:
                    results[side] = wl.run(session, items, params, spec.device)
                finally:
                    session.close()
            except BadInput as e:
                failures.append(dict(workload=entry.id, side=side, error=str(e)))
            except Exception as e:    # a crashed side is a recorded failure, not a lost run
                failures.append(dict(workload=entry.id, side=side,
                                     error=f"{type(e).__name__}: {e}",
                                     traceback=traceback.format_exc(limit=8)))
            bar.update(1)
        if len(results) == 2:                # per-request agreement, for tables and plots
            for row, b, c in zip(results["candidate"].requests, results["baseline"].tokens,
                                 results["candidate"].tokens):
                row["first_divergence"] = first_divergence(b, c)
                row["agrees"] = row["first_divergence"] == -1
        for side, res in results.items():
            writer.add_side(entry.id, side, res)
            resolved.setdefault(entry.id, {})[side] = res.resolved
            metrics.setdefault(entry.id, {})[side] = latency_summary(res)
        if len(results) == 2:
            checks += [c.to_dict() for c in compare(entry.id, results["baseline"],
                                                    results["candidate"], suite.thresholds)]
    bar.close()
    verdict, code = overall_verdict(checks, failures)
    summary = dict(verdict=verdict, suite=suite.name, target=target_name,
                   baseline=base.runner, candidate=cand.runner,
                   candidate_faults=list(cand.faults), checks=checks, failures=failures,
                   metrics=metrics, wall_s=round(time.time() - t_start, 2))
    manifest = dict(environment(), suite=suite.model_dump(), target=target_name,
                    sides=dict(baseline=asdict(base), candidate=asdict(cand)),
                    seeds=dict(engine=dict(baseline=base.seed, candidate=cand.seed),
                               workloads={e.id: getattr(p, "seed", None) for e, _, p, _ in plan}),
                    workloads={e.id: dict(workload=e.workload, params=p.model_dump(),
                                          source=getattr(wl, "source", lambda _: None)(p),
                                          items=len(items)) for e, wl, p, items in plan},
                    resolved=resolved)
    path = writer.commit(manifest, summary)
    return summary, code, path
