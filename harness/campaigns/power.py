"""`mrbench power`: the suite clean and with the slow-step ruler (harness/run/faults.py) on
the candidate; the smallest slowdown each latency check catches."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

from mrbench.contract import BadInput

from ..checks import stats
from ..record.metrics import LATENCY
from ..record.results import environment
from ..record.run_record import Environment, RunSummary, RunVerdict, Verdict
from ..record.study_record import Detection, PowerCheck, PowerRun, PowerStudy
from ..record.suite import Suite
from ..run import faults as fault_registry
from ..run.orchestrate import Isolation, Overrides
from ..run.targets.base import SideSpec
from .calibrate import aggregate_calibration
from .campaign import Campaign, guarded, sides_of, check_name, flagged, one_comparison
from .readings import POWER_TARGET, latency_bar


def power(suite: Suite, base: SideSpec, cand: SideSpec, pcts: list[float], n: int,
          overrides: Overrides, out: Path, log=None,
          isolation: Isolation | None = None) -> tuple[PowerStudy, Path]:
    """The smallest slowdown each latency check catches.

    The suite n times clean (candidate vs baseline: every latency regression is a false
    alarm) and n times per PCT with the `slow-step:PCT` ruler on the candidate (every
    latency regression is a detection). The settings take turns (clean, then each PCT, n
    rounds), so a drift of the machine over the campaign falls on every setting alike, and
    a campaign cut off part-way (a GPU job ended by its time limit) leaves every setting measured
    about as often; `mrbench power --from-runs` reads such pieces back (read_back,
    aggregate_power)."""

    def body(camp: Campaign) -> PowerStudy:
        runs = []
        for i in range(n):
            for pct in (None, *pcts):
                side = (cand if pct is None
                        else replace(cand, faults=(fault_registry.ruler_name(pct),)))
                runs.append(camp.run(f"{'clean' if pct is None else f'slow{pct:g}'}-{i:02d}",
                                     suite, base, side, overrides, log))
        return aggregate_power(suite, runs, pcts).model_copy(
            update={"environment": Environment.model_validate(environment())})
    return guarded(out, body, isolation)


def ruler_pct(summary: RunSummary) -> float | None:
    """The slow-step size a run's candidate carried: None for a clean run; BadInput for a
    run with any other fault (it measures neither false alarms nor the ruler)."""
    faults = summary.candidate_faults
    if not faults:
        return None
    pct = fault_registry.ruler_pct(faults[0]) if len(faults) == 1 else None
    if pct is not None:
        return pct
    raise BadInput(f"a run with candidate faults {faults} is neither clean nor one "
                   f"slow-step ruler")


def aggregate_power(suite: Suite, runs: list[tuple[RunSummary, int]],
                    pcts: list[float] | None = None) -> PowerStudy:
    """power.json (study_record.PowerStudy) from runs' (summary, exit code), clean and
    slow-step:PCT mixed, any number of each: a finished campaign, or the pieces of one that
    several time-limited GPU jobs ran (`mrbench power --from-runs`). Per latency check:
    false alarms over the clean runs that carried it, detections over each PCT's runs that
    carried it (Wilson 95 % CIs), the MDE (smallest PCT detected in >= POWER_TARGET of its
    runs, as is every larger one), what each PCT moved (realized_pct), and the clean runs'
    shift-model projection beside it, so the projection can be checked against the
    ruler."""
    one_comparison(runs)
    plans = [ruler_pct(s) for s, _ in runs]
    pcts = sorted({p for p in plans if p is not None} if pcts is None else set(pcts))
    per: dict[str, dict] = defaultdict(lambda: dict(aa=0, aa_runs=0, det=defaultdict(int),
                                                    det_runs=defaultdict(int),
                                                    threshold=None, bar=None,
                                                    judged=False))
    rows = []
    for i, ((s, code), pct) in enumerate(zip(runs, plans)):
        hits = [c for c in s.checks if c.metric in LATENCY]
        # each latency check's estimate and p, so a bar can be re-judged from the same
        # runs (the per-run summaries hold the rest)
        rows.append(PowerRun(plan="clean" if pct is None else fault_registry.ruler_name(pct), run=i,
                             verdict=s.verdict, exit=code, flagged=flagged(s),
                             failures=len(s.failures), wall_s=s.wall_s,
                             estimates={check_name(c): (c.delta, c.p_value) for c in hits}))
        for c in hits:
            row = per[check_name(c)]
            row["threshold"] = c.threshold
            row["bar"] = latency_bar(suite, c.workload, c.metric)
            row["judged"] |= c.verdict != Verdict.INFO
            hit = c.verdict == Verdict.REGRESSION
            if pct is None:
                row["aa_runs"] += 1
                row["aa"] += hit
            elif pct in pcts:
                row["det_runs"][pct] += 1
                row["det"][pct] += hit
    projected = aggregate_calibration(suite, [r for r, p in zip(runs, plans) if p is None])
    checks = {}
    for name, row in sorted(per.items()):
        fa = stats.proportion_ci_wilson(row["aa"], row["aa_runs"], level=0.95)
        det = {}
        for p in pcts:
            k, m = row["det"][p], row["det_runs"][p]
            ci = stats.proportion_ci_wilson(k, m, level=0.95)
            det[f"{p:g}"] = Detection(detected=k, runs=m, rate=k / m if m else None,
                                      rate_ci=(ci.lo, ci.hi) if m else None)
        # the smallest PCT from which every larger one also reached the target: a miss
        # above a hit says the hit was luck, not power
        mde = None
        for p in reversed(pcts):
            if (det[f"{p:g}"].rate or 0) < POWER_TARGET:
                break
            mde = p
        aa = projected.checks.get(name)       # the clean runs' readings of the check
        readings = {} if aa is None else dict(projection=aa.projection,
                                              heterogeneity=aa.heterogeneity,
                                              exceedance=aa.exceedance)
        checks[name] = PowerCheck(
            threshold=row["threshold"], bar=row["bar"], judged=row["judged"],
            false_alarms=row["aa"], aa_runs=row["aa_runs"],
            false_alarm_rate=row["aa"] / row["aa_runs"] if row["aa_runs"] else None,
            false_alarm_ci=(fa.lo, fa.hi) if row["aa_runs"] else None,
            detection=det, mde_pct=mde, **readings)
    per_plan = {"clean": plans.count(None), **{f"{p:g}": plans.count(p) for p in pcts}}
    # what the ruler moved, in the gate's own estimate: a nominal PCT is a share of a
    # measured time, and the step's response to it is measured here, not assumed
    realized: dict[str, dict[str, float]] = defaultdict(dict)
    added: dict[str, float] = {}
    for metric in ("median_step_ms", "median_tpot_ms", "p99_step_ms", "p99_itl_ms"):
        for p in pcts:
            d = [c.delta for (s, _), q in zip(runs, plans) if q == p for c in s.checks
                 if c.metric == metric and c.delta is not None]
            if d:
                realized[f"{p:g}"][metric] = float(np.median(d)) * 100
    for p in pcts:        # the ruler's own account of its busy time (latency.ruler_added_pct)
        a = [side["ruler_added_pct"] for (s, _), q in zip(runs, plans) if q == p
             for m in s.metrics.values()
             if (side := m.get("candidate") or {}).get("ruler_added_pct") is not None]
        if a:
            added[f"{p:g}"] = float(np.median(a))
    last = runs[-1][0] if runs else None
    return PowerStudy(
            suite=suite.name, **sides_of(last), n=min(per_plan.values()),
            runs_per_plan=per_plan,
            pcts=list(pcts), power_target=POWER_TARGET, runs=rows, checks=checks,
            realized_pct=dict(realized), ruler_added_pct=added,
            errors=sum(r.verdict == RunVerdict.ERROR for r in rows),
            method=f"clean runs: a latency regression is a false alarm; slow-step:PCT runs "
                   f"(busy work of PCT % of the candidate's measured step): a latency "
                   f"regression is a detection; settings in turn; MDE: smallest PCT "
                   f"detected in >= {POWER_TARGET:.0%} of its runs, as is every larger "
                   f"one; rates: Wilson 95% CI; "
                   f"projection: the clean runs' shift model; realized_pct: the median "
                   f"over a PCT's runs of the gate's estimate, per median and P99 check (%); "
                   f"ruler_added_pct: the median over a PCT's runs of the ruler's own "
                   f"busy time as a share of the steps it slowed (%)")
