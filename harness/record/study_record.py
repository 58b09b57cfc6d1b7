"""calibration.json and power.json, the results of `mrbench calibrate` and `mrbench power`,
as typed records (`Calibration`, `PowerStudy`), beside faults.json's (campaign_record).

Why typed: both were dicts built in one place and read by string keys in the command's
table, the campaign's report, its figures and the tests, so a key renamed on one side was
a KeyError (or a silently empty column) on the other. Here each field is written once: the
campaign's aggregation builds the model, campaign_record.write_result writes it, and every
reader takes it from `read_calibration` / `read_power_study` (or from the aggregation
itself), so a file that is not a calibration or a power study is refused in one line where
it is read.

The JSON is the dicts' as they were (field names and nesting). A field added after the
first files were written has a default, so those files still read: a row's `estimates`, a
check's `projection`, `heterogeneity`, `exceedance` and (power) `bar`, a power study's
`realized_pct` and `ruler_added_pct`, and `read_back`.
"""
from __future__ import annotations

from pathlib import Path

from .campaign_record import CampaignResult, read_result
from .run_record import Environment, RunVerdict, _Record

Estimate = tuple[float | None, float | None]     # a judged check's (delta, p_value) in a run


class Projection(_Record):
    """A latency check's power projected from its A/A runs (the shift model,
    stats_across_runs.projected_mde_aa): per shift in % (`rates`, keyed "5", "7.6", ...)
    the share of runs that would flag it, and the smallest shift reaching the target."""

    bar: float
    runs: int
    rates: dict[str, float] = {}
    mde_pct: float | None = None
    method: str = ""


class Heterogeneity(_Record):
    """Whether a latency check's A/A runs spread wider than their own CIs say
    (stats_across_runs.heterogeneity_cochran_q on the runs' log ratios, or on each engine
    pair's where the runs measured several); `tau_pct`, the spread between them in %: what
    a suite's `pair_sd_rel` is set from."""

    runs: int
    q: float
    df: int
    p_value: float
    i2: float
    tau_pct: float
    se_ratio: float
    units: str = "runs"        # what `runs` counts: "runs", or "engine pairs" (several a run)
    method: str = ""


class Exceedance(_Record):
    """A latency check's false-alarm rate bounded from its A/A estimates
    (stats_across_runs.exceedance_bound_normal_nct): the plug-in `estimate` and its
    `upper` bound at `level`, against `bar`, with the normal model's fit (`normality_p`)."""

    bar: float
    runs: int
    estimate: float
    upper: float
    level: float
    normality_p: float
    method: str = ""


class ReadBack(_Record):
    """Where a result read back from finished runs (`--from-runs`) took them: the
    directories as given, and `waves` when each run was re-judged on its first N."""

    dirs: list[str]
    waves: int | None = None


class StudyRun(_Record):
    """One run of a study: its verdict and exit code, the checks it flagged, how many sides
    failed (`failures`, a count), and each judged check's (delta, p_value), so a bar can be
    re-judged from the runs without their directories."""

    run: int
    verdict: RunVerdict
    exit: int
    flagged: list[str] = []
    failures: int = 0
    estimates: dict[str, Estimate] = {}


class CalibrationCheck(_Record):
    """One check over the A/A runs: every regression verdict a false alarm (`rate`, Wilson
    95 % `rate_ci`), and the spread of its delta over the runs that judged it (`judged`
    of `runs`); for a latency check judged with a CI, the projection, heterogeneity and
    exceedance readings."""

    runs: int
    false_alarms: int
    rate: float
    rate_ci: tuple[float, float]
    judged: int
    threshold: str | None = None
    delta_median: float | None = None
    delta_max: float | None = None
    delta_min: float | None = None
    deltas: list[float] = []
    ci_hi_max: float | None = None
    projection: Projection | None = None
    heterogeneity: Heterogeneity | None = None
    exceedance: Exceedance | None = None


class _Study(CampaignResult):
    """What both studies' files begin with: the comparison they measured and their run
    count; `environment` (a campaign's) and `read_back` (runs read back) are left out
    where unset."""

    omit_none = frozenset({"environment", "read_back"})

    suite: str
    target: str | None = None
    baseline: str | None = None
    candidate: str | None = None
    n: int


class Calibration(_Study):
    """calibration.json: `mrbench calibrate`'s A/A study. `max_rate`: the worst check's
    false-alarm rate; `errors`: the runs in error. A campaign records its `environment`;
    a result read back from runs records where they came from (`read_back`) instead."""

    filename = "calibration.json"
    what = "a calibration"
    runs: list[StudyRun] = []
    checks: dict[str, CalibrationCheck] = {}
    max_rate: float = 0.0
    errors: int = 0
    method: str = ""
    environment: Environment | None = None
    read_back: ReadBack | None = None


class PowerRun(_Record):
    """One run of a power study, as a StudyRun (the latency checks' estimates only), with
    its setting (`plan`: "clean" or "slow-step:PCT") and its wall time; the fields in the
    order the file has always held them."""

    plan: str
    run: int
    verdict: RunVerdict
    exit: int
    flagged: list[str] = []
    failures: int = 0
    wall_s: float | None = None
    estimates: dict[str, Estimate] = {}


class Detection(_Record):
    """One ruler size's detections of one check: flagged in `detected` of the `runs` that
    carried it; no rate where no run did."""

    detected: int
    runs: int
    rate: float | None = None
    rate_ci: tuple[float, float] | None = None


class PowerCheck(_Record):
    """One latency check of a power study: false alarms over the clean runs (`aa_runs`),
    detections per ruler size (keyed as `pcts` print, "5", "7.6"), the measured MDE, and the
    clean runs' projection, heterogeneity and exceedance readings beside it. `bar`: the
    relative bar it was judged against; `judged`: whether any run judged it."""

    threshold: str | None = None
    bar: float | None = None
    judged: bool = False
    false_alarms: int
    aa_runs: int
    false_alarm_rate: float | None = None
    false_alarm_ci: tuple[float, float] | None = None
    detection: dict[str, Detection] = {}
    mde_pct: float | None = None
    projection: Projection | None = None
    heterogeneity: Heterogeneity | None = None
    exceedance: Exceedance | None = None


class PowerStudy(_Study):
    """power.json: `mrbench power`'s study. `n`: the fewest runs of any setting
    (`runs_per_plan`); `realized_pct`: per size, what it moved each median and P99 check
    by (%, the gate's estimate); `ruler_added_pct`: per size, the ruler's own account of
    its busy time (%). `environment` / `read_back` as in Calibration."""

    filename = "power.json"
    what = "a power study"
    runs_per_plan: dict[str, int] = {}
    pcts: list[float] = []
    power_target: float
    runs: list[PowerRun] = []
    checks: dict[str, PowerCheck] = {}
    realized_pct: dict[str, dict[str, float]] = {}
    ruler_added_pct: dict[str, float] = {}
    errors: int = 0
    method: str = ""
    environment: Environment | None = None
    read_back: ReadBack | None = None


def read_calibration(camp_dir: Path) -> Calibration:
    """calibration.json under `camp_dir` (campaign_record.read_result): BadInput in one
    line when it is missing, corrupt, newer, or not a calibration."""
    return read_result(camp_dir, Calibration)


def read_power_study(camp_dir: Path) -> PowerStudy:
    """power.json under `camp_dir` (campaign_record.read_result): BadInput in one line
    when it is missing, corrupt, newer, or not a power study."""
    return read_result(camp_dir, PowerStudy)
