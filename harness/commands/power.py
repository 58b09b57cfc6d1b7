"""`mrbench power`: detection power, the suite clean and with slow-step:PCT, N runs each;
the minimum detectable slowdown per latency check."""
from __future__ import annotations

import argparse
from dataclasses import replace

from mrbench.contract import BadInput

from ..campaign import power
from ..errors import EXIT_PASS, EXIT_RUN_FAILED
from ..results import default_out
from ..targets.base import get_target
from .common import isolation_of, print_campaign_json, render_campaign_reports, suite_and_sides


def main(a: argparse.Namespace) -> int:
    if a.n < 1:
        raise BadInput(f"-n must be >= 1, got {a.n}")
    try:
        pcts = sorted({float(x) for x in a.pcts.split(",") if x.strip()})
    except ValueError:
        raise BadInput(f"--pcts must be numbers separated by commas, got {a.pcts!r}") from None
    suite, base, cand, overrides = suite_and_sides(a)
    if not pcts:
        raise BadInput("--pcts is empty")
    for p in pcts:                         # the target's own check of the ruler
        get_target(cand.target).validate(replace(cand, faults=(f"slow-step:{p:g}",)))
    out = a.out or default_out(f"power-{suite.name}")
    res, path = power(suite, base, cand, pcts, a.n, overrides, out, isolation=isolation_of(a))
    render_campaign_reports(path, "power", res)
    if a.json:
        print_campaign_json(res)
    else:
        print(f"{res['baseline']} vs {res['candidate']} + slow-step, {a.n} runs each, "
              f"{res['suite']}")
        w = max((len(k) for k in res["checks"]), default=10)
        print(f"{'check':<{w}}  false alarms  " + "  ".join(f"{p:>6g}%" for p in pcts)
              + "  MDE")
        for name, c in res["checks"].items():
            det = "  ".join(f"{c['detection'][f'{p:g}']['rate']:>6.0%}" for p in pcts)
            mde = "-" if c["mde_pct"] is None else f"{c['mde_pct']:g}%"
            gate = "" if c["judged"] else "  (reported, not judged)"
            print(f"{name:<{w}}  {c['false_alarms']:>2}/{a.n:<2}        {det}  {mde}{gate}")
        print(f"results: {path}")
    return EXIT_RUN_FAILED if res["errors"] else EXIT_PASS
