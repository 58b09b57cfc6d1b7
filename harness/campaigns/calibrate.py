"""`mrbench calibrate`: the suite N times with the same runner on both sides (or a clean
candidate, to measure a cross-runner gap); every regression verdict there is a false alarm,
and the rate per check is what a threshold is judged by."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from ..checks import stats
from ..record.metrics import LATENCY
from ..record.results import environment
from ..record.run_record import Environment, RunSummary, RunVerdict, Verdict
from ..record.study_record import Calibration, CalibrationCheck, StudyRun
from ..record.suite import Suite
from ..run.orchestrate import Isolation, Overrides
from ..run.targets.base import SideSpec
from ..show import formatting
from .campaign import Campaign, guarded, sides_of, check_name, flagged, one_comparison
from .readings import entry_thresholds, exceedance, heterogeneity, latency_bar, projection


def calibrate(suite: Suite, base: SideSpec, cand: SideSpec, n: int,
              overrides: Overrides, out: Path, log=None,
              isolation: Isolation | None = None) -> tuple[Calibration, Path]:
    """Run the suite n times; per check, the false-alarm rate (Wilson CI) and the spread of
    its delta, so a threshold can be set above what a no-change comparison produces."""
    def body(camp: Campaign) -> Calibration:
        runs = [camp.run(f"run-{i:02d}", suite, base, cand, overrides, log) for i in range(n)]
        return aggregate_calibration(suite, runs).model_copy(
            update={"environment": Environment.model_validate(environment())})
    return guarded(out, body, isolation)


def aggregate_calibration(suite: Suite, runs: list[tuple[RunSummary, int]]) -> Calibration:
    """calibration.json (study_record.Calibration) from A/A runs' (summary, exit code):
    also what a campaign cut off before its end is read back with (`mrbench calibrate
    --from-runs`, read_back)."""
    one_comparison(runs)
    per: dict[str, dict] = defaultdict(lambda: dict(alarms=0, runs=0, deltas=[], ci_hi=[],
                                                    threshold=None, shift=[]))
    rows = []
    for i, (s, code) in enumerate(runs):
        # each judged check's estimate and p, so a bar can be re-judged from the runs
        rows.append(StudyRun(run=i, verdict=s.verdict, exit=code, flagged=flagged(s),
                             failures=len(s.failures),
                             estimates={check_name(c): (c.delta, c.p_value)
                                        for c in s.checks if c.verdict != Verdict.INFO}))
        for c in s.checks:
            row = per[check_name(c)]
            row["runs"] += 1
            row["alarms"] += c.verdict == Verdict.REGRESSION
            row["threshold"] = c.threshold
            if c.verdict != Verdict.INFO and c.delta is not None:
                row["deltas"].append(c.delta)
                if c.ci and c.ci[1] is not None:
                    row["ci_hi"].append(c.ci[1])
                if c.metric in LATENCY and c.ci and c.ci[0] is not None:
                    row["shift"].append((c.delta, c.ci[0]))
                    row["bar"] = latency_bar(suite, c.workload, c.metric)
                    if c.ci[1] is not None:
                        row.setdefault("ci", []).append((c.delta, *c.ci))
                        row["alpha"] = entry_thresholds(suite, c.workload).alpha
                    row.setdefault("pairs", []).extend(c.pairs or [])
    checks = {}
    for name, row in sorted(per.items()):
        d = np.array(row["deltas"], dtype=float)
        ci = stats.proportion_ci_wilson(row["alarms"], row["runs"], level=0.95)
        checks[name] = CalibrationCheck(
            runs=row["runs"], false_alarms=row["alarms"],
            rate=row["alarms"] / row["runs"], rate_ci=(ci.lo, ci.hi),
            judged=len(d), threshold=row["threshold"],
            delta_median=float(np.median(d)) if len(d) else None,
            delta_max=float(d.max()) if len(d) else None,
            delta_min=float(d.min()) if len(d) else None, deltas=d.tolist(),
            ci_hi_max=max(row["ci_hi"]) if row["ci_hi"] else None,
            projection=projection(row), heterogeneity=heterogeneity(row),
            exceedance=exceedance(row))
    worst = max((c.rate for c in checks.values()), default=0.0)
    last = runs[-1][0] if runs else None
    return Calibration(suite=suite.name, **sides_of(last), n=len(runs), runs=rows,
                       checks=checks, max_rate=worst,
                       errors=sum(r.verdict == RunVerdict.ERROR for r in rows),
                       method="every regression verdict of a no-change comparison is a "
                              "false alarm; rate CI: Wilson 95%")


def fmt_rate(c: CalibrationCheck) -> str:
    """A calibration check's false-alarm rate as the CLI prints it."""
    return formatting.fmt_rate(c.false_alarms, c.runs, c.rate, c.rate_ci)
