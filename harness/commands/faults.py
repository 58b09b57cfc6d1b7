"""`mrbench faults`: the catch matrix, the suite clean and then once per fault (or ruler)."""
from __future__ import annotations

import argparse
from dataclasses import replace

from ..campaigns.faults import fault_matrix
from ..record.campaign_record import FaultStatus
from ..record.errors import EXIT_PASS, EXIT_REGRESSION, EXIT_RUN_FAILED
from ..record.results import default_out
from ..run import faults as fault_registry
from ..run.targets.base import get_target
from .common import (
    isolation_of,
    print_campaign_json,
    render_campaign_reports,
    run_options,
    suite_and_sides,
)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`mrbench faults`: run's options (common.run_options) and its own two."""
    f = sub.add_parser("faults", help="the catch matrix: the suite clean, then once per fault")
    f.add_argument("what", nargs="*", default=["quick"], metavar="SUITE|WORKLOAD")
    run_options(f)
    f.add_argument("--fault", action="append", default=[], metavar="NAME",
                   help="only these faults (repeatable; default: every fault of the target)")
    f.add_argument("--ruler", action="append", default=[], metavar="slow-step:PCT",
                   help="also a latency ruler: PCT %% of the forward's time added to every "
                        "V2 step (bundled target); it must be caught like a fault")
    return f


def main(a: argparse.Namespace) -> int:
    suite, base, cand, overrides = suite_and_sides(a)
    target = get_target(cand.target)
    info = target.info()
    # a fault with nothing to catch on the installed release runs only when named
    not_run = {} if a.fault else dict(info.get("inert", {}))
    catch = fault_registry.catch_matrix(fault_registry.owner(target))
    faults = (a.fault or [f for f in catch if f not in not_run]) + a.ruler
    for f in faults:           # the target's own check: its faults, and rulers like slow-step
        target.validate(replace(cand, faults=(f,)))
    out = a.out or default_out(f"faults-{suite.name}")
    res, path = fault_matrix(suite, base, cand, faults, overrides, out,
                             isolation=isolation_of(a), not_run=not_run)
    render_campaign_reports(path, "faults", res)
    if a.json:
        print_campaign_json(res)
    else:
        c = res.clean
        print(f"clean: {c.verdict} ({c.false_alarms} false alarms"
              f"{': ' + ', '.join(c.flagged) if c.flagged else ''})")
        for name, r in res.faults.items():
            by = ", ".join(r.by) if r.by else "-"
            why = f" ({r.failures[0].side}: {r.failures[0].error[:160]})" \
                if r.status == FaultStatus.NOT_MEASURED else ""
            also = (f" (not counted, they alarmed clean too: {', '.join(r.alarmed_clean)})"
                    if r.alarmed_clean else "")
            print(f"{name:<26} {r.status.upper() if r.caught else r.status}  by {by}{why}{also}")
        for name, why in res.not_run.items():
            print(f"{name:<26} not run: nothing to catch on vLLM {info.get('installed')}: "
                  f"{why} (name it with --fault to run it)")
        print(f"results: {path}")
    if res.any_failed():
        return EXIT_RUN_FAILED
    return EXIT_PASS if res.all_caught_without_false_alarms() else EXIT_REGRESSION
