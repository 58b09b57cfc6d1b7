"""Many runs of one suite, judged together: the fault catch matrix and A/A calibration.

`faults`: the suite clean (it must pass), then once per fault switch on the candidate; the
matrix says which checks flagged each fault. `calibrate`: the suite N times with the same
runner on both sides (or a clean candidate, to measure a cross-runner gap); every
regression verdict there is a false alarm, and the rate per check is what a threshold is
judged by. `power`: the suite clean and with the slow-step ruler; the smallest slowdown
each latency check catches. Each writes one directory (the runs, plus its result:
faults.json, calibration.json or power.json, a typed record of harness/record, written by
campaign_record.write_result alone), renamed into place only when complete; the command
renders the reports once it is there.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Callable, TypeVar

import numpy as np
from scipy.stats import norm

from mrbench.contract import BadInput

from ..checks import stats, stats_across_runs
from ..checks.regate import first_waves
from ..record.metrics import LATENCY
from ..record.campaign_record import (
    CampaignResult,
    CleanRun,
    FaultMatrix,
    FaultRun,
    write_result,
)
from ..record.results import check_out, environment, read_summary
from ..record.run_record import (
    Check,
    Environment,
    RunSummary,
    RunVerdict,
    Verdict,
    overall_verdict,
)
from ..record.study_record import (
    Calibration,
    CalibrationCheck,
    Detection,
    Exceedance,
    Heterogeneity,
    PowerCheck,
    PowerRun,
    PowerStudy,
    Projection,
    ReadBack,
    StudyRun,
)
from ..record.suite import Suite, Thresholds
from ..run import interrupts
from ..run.engine_bank import EngineBank
from ..run.orchestrate import Isolation, Overrides, run_suite
from ..run.targets.base import SideSpec
from ..show import formatting


def run_dir_name(fault: str) -> str:
    """A fault's run directory: `slow-step:50` -> `slow-step-50` (a colon in a relative link
    reads as a URL scheme)."""
    return fault.replace(":", "-")


def check_name(c: Check) -> str:
    return f"{c.workload}/{c.metric}"


def flagged(summary: RunSummary) -> list[str]:
    return sorted(check_name(c) for c in summary.checks if c.verdict == Verdict.REGRESSION)


def fault_run(summary: RunSummary, code: int, run_dir: str,
              false_alarms: set[str]) -> FaultRun:
    """One fault's run judged against the clean run's: a check that flagged the clean run
    too (`false_alarms`) cannot show the fault, so it is kept apart and catches nothing."""
    hits = flagged(summary)
    by = [c for c in hits if c not in false_alarms]
    return FaultRun(caught=bool(by), by=by, alarmed_clean=[c for c in hits if c in false_alarms],
                    verdict=summary.verdict, exit=code, failures=summary.failures, dir=run_dir)


class _Campaign:
    """A hidden directory that becomes `out` only when every run in it is done, and the
    engines its runs share: while a run leaves both sides of a shape unchanged (an A/A
    calibration), their engines are started once and serve the next run too; a run that
    changes one side (a fault, the ruler) starts both again, so that no engine kept across
    runs is measured against a fresh one (harness.engine_bank)."""

    def __init__(self, out: Path, isolation: Isolation | None = None) -> None:
        check_out(out)
        self.isolation = isolation
        self.out = out
        out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        self.bank = EngineBank((isolation or Isolation()).bank_settings())

    def run(self, name: str, suite: Suite, base: SideSpec, cand: SideSpec,
            overrides: Overrides, log=None) -> tuple[RunSummary, int]:
        summary, code, _ = run_suite(suite, base, cand, overrides, self.tmp / name, log,
                                     isolation=self.isolation, bank=self.bank)
        if interrupts.caught():        # held while that run was written: it stops the campaign
            raise KeyboardInterrupt(interrupts.caught())
        return summary, code

    def commit(self, res: CampaignResult) -> Path:
        self.bank.shutdown()
        write_result(self.tmp, res)
        if self.out.exists():
            self.out.rmdir()
        os.replace(self.tmp, self.out)
        return self.out

    def abandon(self) -> None:
        self.bank.kill_all()
        self.bank.shutdown()
        shutil.rmtree(self.tmp, ignore_errors=True)


R = TypeVar("R", bound=CampaignResult)


def _guarded(out: Path, body: Callable[[_Campaign], R],
             isolation: Isolation | None = None) -> tuple[R, Path]:
    """`body`'s result, written into the campaign's directory once every run is done (the
    file its record names), and the directory; nothing left behind when it fails."""
    camp = _Campaign(out, isolation)
    try:
        res = body(camp)
        return res, camp.commit(res)
    except BaseException:
        camp.abandon()
        raise


def fault_matrix(suite: Suite, base: SideSpec, cand: SideSpec, faults: list[str],
                 overrides: Overrides, out: Path, log=None,
                 isolation: Isolation | None = None,
                 not_run: dict[str, str] | None = None) -> tuple[FaultMatrix, Path]:
    """faults.json (campaign_record.FaultMatrix): the suite clean, then once per fault;
    `not_run`, the target's faults left out (nothing to catch)."""
    def body(camp: _Campaign) -> FaultMatrix:
        clean, code = camp.run("clean", suite, base, replace(cand, faults=()), overrides, log)
        false_alarms = set(flagged(clean))
        runs: dict[str, FaultRun] = {}
        for f in faults:
            d = run_dir_name(f)
            s, code_f = camp.run(d, suite, base, replace(cand, faults=(f,)), overrides, log)
            runs[f] = fault_run(s, code_f, d, false_alarms)
        return FaultMatrix(
            suite=suite.name, target=clean.target, baseline=clean.baseline,
            candidate=clean.candidate,
            clean=CleanRun(verdict=clean.verdict, false_alarms=len(flagged(clean)),
                           flagged=flagged(clean), exit=code, failures=clean.failures),
            faults=runs, not_run=dict(not_run or {}),
            environment=Environment.model_validate(environment()))
    return _guarded(out, body, isolation)


def calibrate(suite: Suite, base: SideSpec, cand: SideSpec, n: int,
              overrides: Overrides, out: Path, log=None,
              isolation: Isolation | None = None) -> tuple[Calibration, Path]:
    """Run the suite n times; per check, the false-alarm rate (Wilson CI) and the spread of
    its delta, so a threshold can be set above what a no-change comparison produces."""
    def body(camp: _Campaign) -> Calibration:
        runs = [camp.run(f"run-{i:02d}", suite, base, cand, overrides, log) for i in range(n)]
        return aggregate_calibration(suite, runs).model_copy(
            update={"environment": Environment.model_validate(environment())})
    return _guarded(out, body, isolation)


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
                        row["alpha"] = _entry_thresholds(suite, c.workload).alpha
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
            projection=_projection(row), heterogeneity=_heterogeneity(row),
            exceedance=_exceedance(row))
    worst = max((c.rate for c in checks.values()), default=0.0)
    last = runs[-1][0] if runs else None
    return Calibration(suite=suite.name, **_sides_of(last), n=len(runs), runs=rows,
                       checks=checks, max_rate=worst,
                       errors=sum(r.verdict == RunVerdict.ERROR for r in rows),
                       method="every regression verdict of a no-change comparison is a "
                              "false alarm; rate CI: Wilson 95%")


def _sides_of(s: RunSummary | None) -> dict:
    """A campaign result's target, baseline and candidate: its last run's (None without)."""
    return {k: None if s is None else getattr(s, k) for k in ("target", "baseline", "candidate")}


def finished_runs(dirs: list[Path], suite: Suite) -> list[tuple[Path, RunSummary]]:
    """Every finished run's (directory, summary) under `dirs`, also inside a campaign's
    hidden `.NAME.*` directory: the pieces of a study that time-limited GPU jobs cut off,
    read back by `mrbench calibrate --from-runs` and `mrbench power --from-runs`
    (read_back). BadInput (one line) when a directory is missing, there is no run, a
    summary is not a run's summary (results.read_summary), or no run is of `suite`."""
    missing = [str(d) for d in dirs if not d.is_dir()]
    if missing:         # else a mistyped piece of a study would be left out without a word
        raise BadInput(f"no such directory: {', '.join(missing)}")
    # one entry per file: `DIR DIR/sub` names the runs under DIR/sub twice
    files = sorted({f.resolve(): f for d in dirs for f in d.glob("**/summary.json")}.values())
    if not files:
        raise BadInput(f"no run summary.json under {', '.join(map(str, dirs))}")
    _one_copy_each([f.parent for f in files])
    runs = [(f.parent, read_summary(f.parent)) for f in files]
    base = suite.name.split(".")[0]          # gpu-quick:gsm8k runs are "gpu-quick.gsm8k"
    other = sorted({s.suite for _, s in runs if str(s.suite).split(".")[0] != base},
                   key=str)
    if other:
        raise BadInput(f"runs of suite {other[0]} are not runs of {suite.name}")
    wanted = {w.id for w in suite.workloads}
    if not any(c.workload.split(".")[0] in wanted for _, s in runs for c in s.checks):
        raise BadInput(f"the runs are not of suite {suite.name}")
    return runs


def _one_copy_each(run_dirs: list[Path]) -> None:
    """BadInput (one line) when two of `run_dirs` hold one run: a copy of a study's pieces
    read back beside the original would count each of its runs twice, and every rate,
    spread and projection built on them would claim runs that never happened. A run is
    known by its summary's bytes and its manifest's creation time (to the microsecond);
    one whose manifest names no creation time is not matched. Directories nested in each other (`DIR
    DIR/sub`) are globbed once already."""
    seen: dict[tuple[str, str], Path] = {}
    for d in run_dirs:
        manifest = d / "manifest.json"
        created = json.loads(manifest.read_text()).get("created") if manifest.is_file() \
            else None
        if not created:                 # no moment recorded: nothing to match it by
            continue
        key = (hashlib.sha256((d / "summary.json").read_bytes()).hexdigest(), created)
        if key in seen:
            raise BadInput(f"{seen[key]} and {d} are one run read twice (the same summary "
                           "and creation time): pass each run once")
        seen[key] = d


def clean_runs_only(runs: list[tuple[Path, RunSummary]]) -> list[tuple[Path, RunSummary]]:
    """`runs` unchanged when none carries candidate faults; BadInput (one line) otherwise:
    an A/A study (calibration, build order) takes no-change runs only, and a power study's
    ruler runs are not that."""
    faulted = [str(d) for d, s in runs if s.candidate_faults]
    if faulted:
        raise BadInput(f"{len(faulted)} runs carry candidate faults (first: {faulted[0]}); "
                       f"an A/A study takes clean runs only")
    return runs


def one_comparison(runs: list[tuple[RunSummary, int]]) -> None:
    """BadInput (one line) unless every run compared the same suite, target, baseline and
    candidate: runs read back from several directories may mix studies, and their counts
    together would describe none of them (a campaign's own runs always pass)."""
    kinds = {(s.suite, s.target, s.baseline, s.candidate) for s, _ in runs}
    if len(kinds) > 1:
        raise BadInput("the runs are of different comparisons (suite, target, baseline, "
                       f"candidate): {sorted(map(str, kinds))}")


def read_back(dirs: list[Path], suite: Suite, waves: int | None = None,
              clean_only: bool = False) -> list[tuple[RunSummary, int]]:
    """The finished runs under `dirs` (finished_runs) as (summary, exit code), the form a
    campaign's aggregate takes, so that a campaign cut off or run in pieces over several
    time-limited GPU jobs is judged by the very function the finished campaign uses.

    `waves`: each run re-judged on its first N waves alone (regate.first_waves), e.g. what
    the suite's 96 waves would have shown of a 192-wave study. `clean_only`: an A/A study,
    runs with candidate faults refused (clean_runs_only). The exit code is the gate's for
    the run's checks and failures (orchestrate.overall_verdict), as the run itself gave
    it. The runs come in the order of their paths, not a campaign's turns: only the rows'
    `run` indices can differ from the finished campaign's result. BadInput (one line) as
    finished_runs does, or for `waves` < 1."""
    if waves is not None and waves < 1:       # before reading: not after a long read
        raise BadInput(f"--waves must be at least 1, got {waves}")
    found = finished_runs(dirs, suite)
    if clean_only:
        found = clean_runs_only(found)
    if waves is not None:
        found = [(d, first_waves(d, waves)) for d, _ in found]
    return [(s, overall_verdict(s.checks, s.failures)[1]) for _, s in found]


def _read_back_result(res: R, dirs: list[Path], waves: int | None) -> R:
    """A read-back aggregate as a campaign's result, with where its runs came from
    (`read_back`) in place of the environment (the runs' own manifests hold theirs)."""
    return res.model_copy(update={"read_back": ReadBack(dirs=[str(d) for d in dirs],
                                                        waves=waves)})


def read_back_calibration(dirs: list[Path], suite: Suite,
                          waves: int | None = None) -> Calibration:
    """calibration.json from the finished clean runs under `dirs` (read_back): a
    calibrate campaign's runs, or a power study's clean runs; ruler runs are refused."""
    return _read_back_result(
        aggregate_calibration(suite, read_back(dirs, suite, waves, clean_only=True)),
        dirs, waves)


def read_back_power(dirs: list[Path], suite: Suite, waves: int | None = None) -> PowerStudy:
    """power.json from the finished clean and slow-step runs under `dirs`
    (read_back), told apart by the candidate's recorded faults (ruler_pct)."""
    return _read_back_result(aggregate_power(suite, read_back(dirs, suite, waves)),
                             dirs, waves)


POWER_TARGET = 0.80       # the detection rate a minimum detectable effect must reach
PROJECTED_SHIFTS = (0.02, 0.05, 0.076, 0.10, 0.15, 0.20, 0.30, 0.50)


def _entry_thresholds(suite: Suite, workload: str) -> Thresholds:
    """The thresholds of the suite entry that `workload` belongs to (a sweep's workload is
    `ENTRY.POINT`)."""
    ids = [w.id for w in suite.workloads]
    entry = max((i for i in ids if workload == i or workload.startswith(f"{i}.")),
                key=len, default=None)
    return suite.thresholds_for(entry) if entry else suite.thresholds


def latency_bar(suite: Suite, workload: str, metric: str) -> float | None:
    """The relative bar a latency check of `workload` is judged against: its entry's
    `median_rel` for a median, `latency_rel` for a P99."""
    th = _entry_thresholds(suite, workload)
    return th.median_rel if metric.startswith("median_") else th.latency_rel


def _heterogeneity(row: dict) -> Heterogeneity | None:
    """Whether the A/A runs of a latency check spread wider than their own CIs say (an
    effect of each run's engine instances, which no number of waves averages away):
    stats_across_runs.heterogeneity_cochran_q on the log ratios, each run's standard error read off its
    CI (level 1 - 2 alpha, normal approximation)."""
    pairs = row.get("pairs", [])
    if len(pairs) >= 3:          # runs over engine pairs: each pair is a unit of its own
        e, se = (np.array(x, dtype=float) for x in zip(*pairs))
        h = stats_across_runs.heterogeneity_cochran_q(e, se)
        units, how = "engine pairs", ("on each engine pair's log ratio (its waves' "
                                      "Hodges-Lehmann estimate, the standard error from "
                                      "that CI)")
    elif len(row.get("ci", ())) >= 3:
        z = float(norm.ppf(1 - row["alpha"]))
        d, lo, hi = (np.array(x, dtype=float) for x in zip(*row["ci"]))
        h = stats_across_runs.heterogeneity_cochran_q(np.log1p(d),
                                                      (np.log1p(hi) - np.log1p(lo)) / (2 * z))
        units, how = "runs", (f"on the runs' per-wave log ratios; each run's standard error "
                              f"from its {1 - 2 * row['alpha']:.0%} CI, normal approximation")
    else:
        return None
    if math.isnan(h.q):
        return None
    return Heterogeneity(
        runs=h.runs, q=h.q, df=h.df, p_value=h.p_value, i2=h.i2,
        tau_pct=math.expm1(h.tau) * 100, se_ratio=h.se_ratio, units=units,
        method=f"{h.method} {how}")


def _exceedance(row: dict) -> Exceedance | None:
    """A latency check's false-alarm rate bounded by its A/A estimates rather than counted:
    how often an estimate clears the bar (stats_across_runs.exceedance_bound_normal_nct on the log
    ratios). A gate alarms only when its estimate clears the bar, so this bounds the rate
    from above; counting needs ~59 clean runs to show a rate under 5 %."""
    if not row["shift"] or row.get("bar") is None:
        return None
    d = np.log1p(np.array([x for x, _ in row["shift"]], dtype=float))
    e = stats_across_runs.exceedance_bound_normal_nct(d, math.log1p(row["bar"]), level=0.95)
    if math.isnan(e.upper):
        return None
    return Exceedance(
        bar=row["bar"], runs=e.runs, estimate=e.estimate, upper=e.upper, level=e.level,
        normality_p=e.normality_p,
        method=f"{e.method}; on the A/A runs' log ratios against log(1 + bar); an upper "
               f"bound on the false-alarm rate (an alarm needs the estimate over the bar), "
               f"under the normal model")


def _projection(row: dict) -> Projection | None:
    """A latency check's projected power from its A/A runs (stats_across_runs.shifted_detection_aa)."""
    if not row["shift"] or row.get("bar") is None:
        return None
    d, lo = zip(*row["shift"])
    rates, mde = stats_across_runs.projected_mde_aa(d, lo, row["bar"], PROJECTED_SHIFTS, POWER_TARGET)
    return Projection(
        bar=row["bar"], runs=len(d), rates={f"{s * 100:g}": r for s, r in rates.items()},
        mde_pct=None if mde is None else mde * 100,
        method="shift model: each A/A run's per-wave HL estimate and signed-rank CI moved by "
               "a uniform slowdown; detected when the CI's lower bound clears 0 and the "
               "estimate the bar; assumes a uniform slowdown (`mrbench power` measures a "
               "real one)")


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

    def body(camp: _Campaign) -> PowerStudy:
        runs = []
        for i in range(n):
            for pct in (None, *pcts):
                side = cand if pct is None else replace(cand, faults=(f"slow-step:{pct:g}",))
                runs.append(camp.run(f"{'clean' if pct is None else f'slow{pct:g}'}-{i:02d}",
                                     suite, base, side, overrides, log))
        return aggregate_power(suite, runs, pcts).model_copy(
            update={"environment": Environment.model_validate(environment())})
    return _guarded(out, body, isolation)


def ruler_pct(summary: RunSummary) -> float | None:
    """The slow-step size a run's candidate carried: None for a clean run; BadInput for a
    run with any other fault (it measures neither false alarms nor the ruler)."""
    faults = summary.candidate_faults
    if not faults:
        return None
    if len(faults) == 1 and faults[0].startswith("slow-step:"):
        return float(faults[0].split(":", 1)[1])
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
        rows.append(PowerRun(plan="clean" if pct is None else f"slow-step:{pct:g}", run=i,
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
            suite=suite.name, **_sides_of(last), n=min(per_plan.values()),
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


def fmt_rate(c: CalibrationCheck) -> str:
    """A calibration check's false-alarm rate as the CLI prints it."""
    return formatting.fmt_rate(c.false_alarms, c.runs, c.rate, c.rate_ci)
