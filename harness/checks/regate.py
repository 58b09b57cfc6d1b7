"""Re-gate stored runs: one run's side judged against another run's, from their results
directories alone (what `mrbench compare` does).

Nothing runs again: both runs' tables are read back (`results.load_side`), the checks are
computed with the base run's suite thresholds (its per-workload overrides included), and
the comparison is written as a results directory of its own, whose baseline side is the
base run's data and whose candidate side is the other run's.
"""
from __future__ import annotations

from pathlib import Path

from mrbench.contract import BadInput

from ..record import history
from ..record.metrics import PERCENTILES
from ..record.results import RunWriter, check_out, environment, load_side, read_record
from ..record.run_record import Compared, Manifest, RunSummary
from ..record.suite import Thresholds
from .compare import compare
from .latency import latency_summary


def last_passing_baseline(cand: Path, db: Path) -> Path:
    """The newest passing run in the history `db` comparable with `cand` (same target,
    suite, device, model and runners), or BadInput when there is none."""
    like, _ = history.run_record(cand)
    found = history.last_pass(db, like)
    if found is None:
        raise BadInput(f"no passing run comparable with {cand} in the history ({db})")
    return Path(found)


def recorded_thresholds(manifest: Manifest, workload: str) -> Thresholds:
    """The thresholds a run judged `workload` by: its manifest's suite thresholds with the
    workload's entry's own overrides (a sweep's workload names its entry)."""
    suite = manifest.suite or {}
    overrides = {w.get("id"): w.get("thresholds") or {} for w in suite.get("workloads", [])}
    entry = (manifest.workloads.get(workload) or {}).get("entry", workload)
    return Thresholds.model_validate({**suite.get("thresholds", {}),
                                      **overrides.get(entry, {})})


def regate(base: Path, cand: Path, out: Path, side: str = "candidate",
           percentiles: tuple[float, ...] | None = None) -> tuple[RunSummary, int, Path]:
    """Gate `side` of run `cand` against `side` of run `base`, for the workloads both ran.

    Thresholds: the base run's suite thresholds, with each workload entry's own overrides.
    The summary's pNN_: `percentiles` (compare --percentiles), else the base run's (its
    manifest's; metrics.PERCENTILES for a run before results format 4 recorded them).
    Writes a results directory at `out` (refused first if it is not empty or not
    writable; not rendered: the caller writes its report) and returns (summary, exit code,
    path), the exit code as `mrbench run` gives it. BadInput when a run is not a results
    directory or the two share no workload."""
    bm, bs = read_record(base)
    cm, cs = read_record(cand)
    common = [w for w in bm.workloads if w in cm.workloads]
    if not common:
        raise BadInput(f"{base} and {cand} share no workload")
    check_out(out)
    percentiles = percentiles or tuple(bm.percentiles or PERCENTILES)
    writer = RunWriter(out)
    checks, metrics = [], {}
    for w in common:
        b, c = load_side(base, w, side), load_side(cand, w, side)
        b.resolved = bm.resolved_side(w, side)
        c.resolved = cm.resolved_side(w, side)
        writer.add_side(w, "baseline", b)
        writer.add_side(w, "candidate", c)
        metrics[w] = dict(baseline=latency_summary(b, percentiles),
                          candidate=latency_summary(c, percentiles))
        checks += compare(w, b, c, recorded_thresholds(bm, w))
    summary = RunSummary.build(checks, [], suite=f"compare {base.name} -> {cand.name}",
                               target=bs.target, baseline=bs.candidate,
                               candidate=cs.candidate, metrics=metrics)
    manifest = Manifest(**environment(),
                        compared=Compared(base=str(base), cand=str(cand), side=side),
                        percentiles=list(percentiles), base_manifest=bm, cand_manifest=cm)
    return summary, summary.exit_code, writer.commit(manifest, summary)


WAVE_TABLES = ("requests", "itl", "steps")     # the timed tables: every row has its wave


def first_waves(run: Path, n: int) -> RunSummary:
    """`run`'s summary with its checks recomputed by the gate (compare) on the first `n`
    ABBA waves of each workload alone.

    Why: a study run at 192 waves then also says what the 96 waves the suite ships would
    have judged, on the same engines and machine (the generated GSM8K problems are a
    stream, so a run's first 96 waves are the shorter entry's prompts). The timed tables
    (requests, itl, steps) keep their rows of waves < n; the profiled pass's tables (op,
    sync and audit counts) and the tokens are the whole run's, judged as recorded. A table
    the run did not keep (a power study's packed runs leave itl.csv out) is "not measured"
    as it would be in the run. The verdict is the gate's on these checks (a campaign's
    aggregate counts it). BadInput when a workload has fewer than `n` waves or a timed
    table without a wave column."""
    if n < 1:
        raise BadInput(f"--waves must be at least 1, got {n}")
    m, s = read_record(run)
    checks = []
    for w in m.workloads:
        sides = {}
        for side in ("baseline", "candidate"):
            res = load_side(run, w, side)
            ran = {r.get("wave") for r in res.steps} - {None}
            if len(ran) < n:
                raise BadInput(f"{run}: {w} ran {len(ran)} waves on the {side} side, "
                               f"fewer than {n}")
            for t in WAVE_TABLES:
                rows = getattr(res, t)
                if rows and "wave" not in rows[0]:
                    raise BadInput(f"{run}: {w}'s {t} table has no wave column")
                setattr(res, t, [r for r in rows if r["wave"] is not None and r["wave"] < n])
            res.resolved = m.resolved_side(w, side)
            sides[side] = res
        checks += compare(w, sides["baseline"], sides["candidate"], recorded_thresholds(m, w))
    return s.rejudged(checks, waves=n)
