"""A power study's table from its runs' summaries, for a campaign that did not finish or
ran in pieces.

`mrbench power` writes power.json only when every run is done, and a GPU lease ends after
30 minutes. A study larger than one lease runs as several campaigns (or one cut off
part-way), each leaving finished runs behind (`clean-NN/` and `slowPCT-NN/summary.json`,
also in a campaign's hidden `.NAME.*` directory). This reads them all, tells clean runs
from ruler runs by the candidate's recorded faults, and aggregates them the way the
command does (campaign.aggregate_power).

Usage: python scripts/power_from_runs.py SUITE DIR [DIR ...] [--json OUT.json]
SUITE is what the runs ran (e.g. gpu-quick:gsm8k): it gives the bars the projection uses.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mrbench.contract import BadInput
from mrbench.harness.campaign import aggregate_power, finished_runs
from mrbench.harness.commands.power import print_power
from mrbench.harness.suite import load_suite


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("suite")
    p.add_argument("dirs", nargs="+", type=Path)
    p.add_argument("--json", type=Path, help="write the aggregate (power.json's form)")
    a = p.parse_args(argv)
    try:
        suite = load_suite(a.suite)
        res = aggregate_power(suite, [(s, 0) for _, s in finished_runs(a.dirs, suite)])
    except BadInput as e:
        print(f"power_from_runs: {e}", file=sys.stderr)
        return 2
    print_power(res)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
