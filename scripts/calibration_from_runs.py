"""A calibrate campaign's table from its runs' summaries, for a campaign that did not finish.

`mrbench calibrate` writes calibration.json only when every run is done. A GPU machine taken
away mid-campaign leaves finished runs behind (`run-NN/summary.json` in the campaign's
hidden `.NAME.*` directory; a power study's `clean-NN` runs are A/A runs too); this
aggregates them the same way (campaign.aggregate_calibration), from one or several such
directories (several machines' pieces of one study). Runs with candidate faults are
refused: they are not no-change runs.

Usage: python scripts/calibration_from_runs.py SUITE DIR [DIR ...] [--json OUT.json] [--waves N]
SUITE is what the runs ran (e.g. gpu-quick:gsm8k): it gives the bars the projection uses.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mrbench.contract import BadInput
from mrbench.harness.campaign import aggregate_calibration, clean_runs_only, finished_runs
from mrbench.harness.commands.calibrate import print_calibration
from mrbench.harness.regate import first_waves
from mrbench.harness.suite import load_suite


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("suite")
    p.add_argument("dirs", nargs="+", type=Path)
    p.add_argument("--waves", type=int, metavar="N",
                   help="judge each run on its first N waves alone (harness.regate.first_waves)")
    p.add_argument("--json", type=Path, help="write the aggregate (calibration.json's form)")
    a = p.parse_args(argv)
    try:
        suite = load_suite(a.suite)
        found = clean_runs_only(finished_runs(a.dirs, suite))
        if a.waves is not None:
            found = [(d, first_waves(d, a.waves)) for d, _ in found]
    except BadInput as e:
        print(f"calibration_from_runs: {e}", file=sys.stderr)
        return 2
    runs = [(s, 0) for _, s in found]
    res = aggregate_calibration(suite, runs)
    print_calibration(res)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
