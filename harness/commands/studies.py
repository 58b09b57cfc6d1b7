"""What the two study commands, `calibrate` and `power`, share: their parser's common part,
the run count, and reading finished runs back (--from-runs, --waves) into a result written
as the campaign itself writes it.

Why apart from common.py: these are the study commands' own; `run` and `faults` use none of
it.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, TypeVar

from mrbench.contract import BadInput

from ..record.atomic_dir import filled_in_place
from ..record.campaign_record import write_result
from ..record.results import check_out
from ..record.study_record import Calibration, PowerStudy
from ..record.suite import Suite, named_suite
from .common import print_campaign_json, render_campaign_reports, run_options

Study = TypeVar("Study", Calibration, PowerStudy)


def add_study_parser(sub: argparse._SubParsersAction, name: str, help_text: str,
                     runs_help: str, baseline_default: str = "v1") -> argparse.ArgumentParser:
    """A study command's parser: the suite, the run options (the candidate defaults to the
    baseline: an A/A study) and -n; the command adds its own, then from_runs_options."""
    p = sub.add_parser(name, help=help_text)
    p.add_argument("what", nargs="*", default=["quick"], metavar="SUITE|WORKLOAD")
    run_options(p, candidate_default=None, baseline_default=baseline_default)
    p.add_argument("-n", type=int, default=None, help=runs_help)
    return p


def from_runs_options(p: argparse.ArgumentParser, result: str) -> None:
    """The options that read finished runs back instead of running: a campaign cut off, or
    run in pieces over several time-limited GPU jobs."""
    p.add_argument("--from-runs", nargs="+", type=Path, metavar="DIR",
                   help="run nothing: judge the finished runs under these directories (also "
                        "inside a campaign's hidden .NAME.* directory) as the campaign would; "
                        "SUITE names what they ran (its bars); writes only with --out "
                        f"({result} and report.html)")
    p.add_argument("--waves", type=int, metavar="N",
                   help="with --from-runs: judge each run on its first N waves alone")


def check_from_runs(a: argparse.Namespace, run_only: dict[str, object]) -> None:
    """BadInput (one line) for options that do not go with --from-runs or without it:
    `run_only` maps the campaign's own flags (e.g. -n) to their values, None when not given
    (reading runs back runs none, so a count given there would be ignored without a word).
    An --out that could not be filled is refused here too, before any run is read."""
    if a.from_runs is None:
        if a.waves is not None:
            raise BadInput("--waves goes with --from-runs (it re-judges finished runs)")
        return
    given = [flag for flag, value in run_only.items() if value is not None]
    if given:
        raise BadInput(f"{given[0]} runs a campaign; --from-runs reads finished runs back "
                       f"and runs none: give one or the other")
    if a.out is not None:
        check_out(a.out)


def runs_count(a: argparse.Namespace, default: int) -> int:
    """-n, else the study's default; BadInput below 1."""
    n = default if a.n is None else a.n
    if n < 1:
        raise BadInput(f"-n must be >= 1, got {n}")
    return n


def read_back(a: argparse.Namespace, kind: str,
              judge: Callable[[list[Path], Suite, int | None], Study]
              ) -> tuple[Study, Path | None]:
    """The study's result judged from the finished runs under --from-runs (nothing runs),
    and with --out its directory, written as the campaign writes it."""
    res = judge(a.from_runs, named_suite(a.what), a.waves)
    return res, None if a.out is None else write_campaign_result(a.out, kind, res)


def print_study(a: argparse.Namespace, res: Study, path: Path | None,
                table: Callable[[Study], None]) -> None:
    """The result as --json asks, else its table and where it was written."""
    if a.json:
        print_campaign_json(res)
    else:
        table(res)
        if path is not None:
            print(f"results: {path}")


def write_campaign_result(out: Path, kind: str, res: Calibration | PowerStudy) -> Path:
    """A campaign's result directory from a result read back from runs (campaign.read_back):
    its file (calibration.json or power.json, campaign_record.write_result) and
    report.html, as a campaign writes them, and for a power study each figure as a PNG
    beside them (for docs). Written whole or not at all (atomic_dir); `out` must be
    missing or empty (check_out)."""
    check_out(out)
    with filled_in_place(out) as tmp:
        write_result(tmp, res)
        render_campaign_reports(tmp, kind, res)
        if isinstance(res, PowerStudy):
            _save_power_figures(tmp, res)
    return out


def _save_power_figures(out: Path, res: PowerStudy) -> None:
    """Each figure of a power study's report as `out`/NAME.png (power-curve, estimates)."""
    import matplotlib.pyplot as plt  # lazy: report rendering, as render_campaign_reports

    from ..show.campaign_report import power_figures
    from ..show.html import DPI
    for name, fig in power_figures(res).items():
        fig.savefig(out / f"{name}.png", dpi=DPI, bbox_inches="tight")
        plt.close(fig)
