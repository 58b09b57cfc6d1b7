"""A campaign cut off or run in pieces (time-limited GPU jobs), judged from its finished
runs by the very aggregates the finished campaign uses (`mrbench calibrate --from-runs`,
`mrbench power --from-runs`)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from mrbench.contract import BadInput

from ..checks.regate import first_waves
from ..record.results import read_summary
from ..record.run_record import RunSummary, overall_verdict
from ..record.study_record import Calibration, PowerStudy, ReadBack
from ..record.suite import Suite
from .calibrate import aggregate_calibration
from .campaign import R
from .power import aggregate_power


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
