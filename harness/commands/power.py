"""`mrbench power`: detection power, the suite clean and with slow-step:PCT, N runs each;
the minimum detectable slowdown per latency check. With --from-runs, the same judgement of
finished runs (a study cut off, or run in pieces over several time-limited GPU jobs)."""
from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from mrbench.contract import BadInput

from ..campaigns.power import power
from ..campaigns.read_back import read_back_power
from ..record.errors import EXIT_PASS, EXIT_RUN_FAILED
from ..record.results import default_out
from ..record.study_record import PowerStudy
from ..run.targets.base import get_target
from ..show.formatting import fmt_exceedance, fmt_heterogeneity, fmt_realized
from . import studies
from .common import isolation_of, render_campaign_reports, suite_and_sides

DEFAULT_RUNS = 5
DEFAULT_PCTS = "10,25,50"


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`mrbench power` and its options; the ruler lives in V2, so A/A on V2 by default."""
    pw = studies.add_study_parser(
        sub, "power", "detection power: the suite clean and with slow-step:PCT on the "
        "candidate, N runs each; the minimum detectable slowdown per latency check",
        "runs per setting (default 5)", baseline_default="v2")
    pw.add_argument("--pcts", default=None,
                    help="slow-step sizes, %% of the measured engine step (default 10,25,50)")
    studies.from_runs_options(pw, "power.json")
    return pw


def main(a: argparse.Namespace) -> int:
    studies.check_from_runs(a, {"-n": a.n, "--pcts": a.pcts})
    if a.from_runs is not None:     # a study time-limited jobs cut off or ran in pieces
        return _finish(a, *studies.read_back(a, "power", read_back_power))
    n = studies.runs_count(a, DEFAULT_RUNS)
    text = DEFAULT_PCTS if a.pcts is None else a.pcts
    try:
        pcts = sorted({float(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise BadInput(f"--pcts must be numbers separated by commas, got {text!r}") from None
    suite, base, cand, overrides = suite_and_sides(a)
    if not pcts:
        raise BadInput("--pcts is empty")
    for p in pcts:                         # the target's own check of the ruler
        get_target(cand.target).validate(replace(cand, faults=(f"slow-step:{p:g}",)))
    out = a.out or default_out(f"power-{suite.name}")
    res, path = power(suite, base, cand, pcts, n, overrides, out, isolation=isolation_of(a))
    render_campaign_reports(path, "power", res)
    return _finish(a, res, path)


def _finish(a: argparse.Namespace, res: PowerStudy, path: Path | None) -> int:
    """Print the result (table or --json) and give the exit code: 3 when a run erred."""
    studies.print_study(a, res, path, print_power)
    return EXIT_RUN_FAILED if res.errors else EXIT_PASS


def _rate(k: int, m: int) -> str:
    return f"{k}/{m} {k / m:.0%}" if m else "not measured"


def print_power(res: PowerStudy) -> None:
    """The power table: per latency check the false alarms, the detections per PCT (count
    over runs, rate), the measured MDE, and the clean runs' projected MDE beside it."""
    pcts = res.pcts
    plan = res.runs_per_plan
    print(f"candidate {res.candidate} + slow-step vs baseline {res.baseline}, "
          f"{res.suite}: runs "
          + ", ".join(f"{k if k == 'clean' else '+' + k + ' %'} {v}" for k, v in plan.items()))
    w = max((len(k) for k in res.checks), default=10)
    print(f"{'check':<{w}}  {'false alarms':>12}  "
          + "  ".join(f"{'+' + format(p, 'g') + ' %':>9}" for p in pcts)
          + "  MDE      projected")
    for name, c in res.checks.items():
        dets = (c.detection[f"{p:g}"] for p in pcts)
        det = "  ".join(f"{_rate(d.detected, d.runs):>9}" for d in dets)
        mde = "-" if c.mde_pct is None else f"{c.mde_pct:g} %"
        proj = c.projection
        pm = "-" if proj is None or proj.mde_pct is None else f"{proj.mde_pct:g} %"
        gate = "" if c.judged else "  (reported, not judged)"
        print(f"{name:<{w}}  {_rate(c.false_alarms, c.aa_runs):>12}  {det}  {mde:<7}  "
              f"{pm}{gate}")
    for line in fmt_realized(res):
        print(f"{line} (median over its runs of the gate's estimate)")
    for line in fmt_heterogeneity(res.checks) + fmt_exceedance(res.checks):
        print(line)
