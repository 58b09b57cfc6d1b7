"""`mrbench calibrate`: A/A, the suite N times with no change; false alarms per check."""
from __future__ import annotations

import argparse

from mrbench.contract import BadInput

from ..campaign import calibrate, fmt_rate
from ..errors import EXIT_PASS, EXIT_REGRESSION, EXIT_RUN_FAILED
from ..formatting import fmt_exceedance, fmt_heterogeneity, fmt_projected_mde
from ..results import default_out
from .common import isolation_of, print_campaign_json, render_campaign_reports, suite_and_sides


def main(a: argparse.Namespace) -> int:
    if a.n < 1:
        raise BadInput(f"-n must be >= 1, got {a.n}")
    if not 0 <= a.max_rate <= 1:
        raise BadInput(f"--max-rate must be in [0, 1], got {a.max_rate}")
    suite, base, cand, overrides = suite_and_sides(a)
    out = a.out or default_out(f"calibrate-{suite.name}")
    res, path = calibrate(suite, base, cand, a.n, overrides, out, isolation=isolation_of(a))
    render_campaign_reports(path, "calibrate", res)
    if a.json:
        print_campaign_json(res)
    else:
        print_calibration(res)
        print(f"results: {path}")
    if res["errors"]:
        return EXIT_RUN_FAILED
    return EXIT_PASS if res["max_rate"] <= a.max_rate else EXIT_REGRESSION


def print_calibration(res: dict) -> None:
    """calibration.json's table: per check, the false alarms, the A/A spread of its delta
    and, for a latency check judged with a CI, the projected MDE."""
    print(f"{res['baseline']} vs {res['candidate']}, {res['n']} runs of {res['suite']}")
    w = max(len(k) for k in res["checks"])
    for name, c in res["checks"].items():
        spread = "" if c["delta_max"] is None else \
            f"  delta {c['delta_min']:+.3g}..{c['delta_max']:+.3g}"
        proj = c.get("projection")
        mde = f"  projected MDE {fmt_projected_mde(proj)}" if proj else ""
        if not c.get("judged"):          # reported as info in every run: nothing judged
            print(f"{name:<{w}}  not judged in any run (reported only)")
            continue
        print(f"{name:<{w}}  false alarms {fmt_rate(c)}{spread}{mde}")
    for line in fmt_heterogeneity(res["checks"]) + fmt_exceedance(res["checks"]):
        print(line)
