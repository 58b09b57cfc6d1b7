"""A power study's table from its runs' summaries, for a campaign that did not finish or
ran in pieces.

`mrbench power` writes power.json only when every run is done, and a GPU lease ends after
30 minutes. A study larger than one lease runs as several campaigns (or one cut off
part-way), each leaving finished runs behind (`clean-NN/` and `slowPCT-NN/summary.json`,
also in a campaign's hidden `.NAME.*` directory). This reads them all, tells clean runs
from ruler runs by the candidate's recorded faults, and aggregates them the way the
command does (campaign.aggregate_power).

Usage: python scripts/power_from_runs.py SUITE DIR [DIR ...] [--json OUT.json] [--waves N]
       [--report OUT_DIR]
SUITE is what the runs ran (e.g. gpu-quick:gsm8k): it gives the bars the projection uses.
--report writes the study's report.html (as `mrbench power` does) and each of its figures
as a PNG beside it (power-curve.png, estimates.png), e.g. for docs/.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mrbench.contract import BadInput
from mrbench.harness.campaign import aggregate_power, finished_runs
from mrbench.harness.commands.power import print_power
from mrbench.harness.regate import first_waves
from mrbench.harness.suite import load_suite


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("suite")
    p.add_argument("dirs", nargs="+", type=Path)
    p.add_argument("--waves", type=int, metavar="N",
                   help="judge each run on its first N waves alone (harness.regate.first_waves)")
    p.add_argument("--json", type=Path, help="write the aggregate (power.json's form)")
    p.add_argument("--report", type=Path, metavar="OUT_DIR",
                   help="write report.html and the figures as PNG files here")
    a = p.parse_args(argv)
    try:
        suite = load_suite(a.suite)
        found = finished_runs(a.dirs, suite)
        if a.waves is not None:
            found = [(d, first_waves(d, a.waves)) for d, _ in found]
        res = aggregate_power(suite, [(s, 0) for _, s in found])
    except BadInput as e:
        print(f"power_from_runs: {e}", file=sys.stderr)
        return 2
    print_power(res)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    if a.report:
        write_report(a.report, res)
    return 0


def write_report(out: Path, res: dict) -> None:
    """report.html and each figure as a PNG, in `out` (made if missing)."""
    import matplotlib.pyplot as plt     # here: only --report needs matplotlib

    from mrbench.harness.campaign_report import power_figures, render_campaign
    from mrbench.harness.html import DPI

    out.mkdir(parents=True, exist_ok=True)
    render_campaign(out, "power", res)
    for name, fig in power_figures(res).items():
        fig.savefig(out / f"{name}.png", dpi=DPI, bbox_inches="tight")
        plt.close(fig)
        print(f"wrote {out / name}.png")
    print(f"wrote {out / 'report.html'}")


if __name__ == "__main__":
    sys.exit(main())
