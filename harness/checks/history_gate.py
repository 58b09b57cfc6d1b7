"""A run's latency ratios judged against the history: the V2-against-V1 gate over time.

Why: V2 and V1 differ by design (on vLLM, V2's median step ran +18.9 % over V1's, clean), so
a V2-against-V1 latency bar has to absorb that difference, and a real V2-only slowdown of
6 % passed it. What does not change from night to night is the difference itself: each
latency check's candidate/baseline estimate is stored in the history (`history.RATIO`), and
with `--history DB` a run judges its own estimate against those of the earlier clean passing
runs of the same comparison (target, suite, device, model, both sides' runners; two builds
of one runner are one line, history.group_label):
a V2-only slowdown moves the ratio, a slower machine moves both sides.

The test is stats_across_runs.prediction_shift_t on log ratios (the earlier runs' spread holds the
run-to-run spread of engine instances that a run's own CI leaves out); the bar is the
entry's `history_rel`, else its median_rel (medians) or latency_rel (P99s). Fewer than
MIN_RUNS earlier ratios: "not measured", with the count.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np

from ..record import history
from ..record.metrics import LATENCY
from ..record.run_record import (
    NOT_GATED,
    Bar,
    BarKind,
    Check,
    DeltaKind,
    Verdict,
    judged_across_runs,
)
from ..record.suite import Thresholds
from . import stats_across_runs

MIN_RUNS = 3                 # earlier ratios the prediction test needs (2 df)
NOT_MEASURED = "not measured: "
SUFFIX = "_vs_history"


def bar_of(th: Thresholds, metric: str) -> float | None:
    if th.history_rel is not None:
        return th.history_rel
    return th.median_rel if metric.startswith("median_") else th.latency_rel


def history_checks(checks: list[Check], like: dict, db: Path,
                   thresholds_for: Callable[[str], Thresholds]) -> list[Check]:
    """One check per judged latency check of the run: its ratio against the history's.
    `like` is the run's history record (history.record_of)."""
    out = []
    for c in checks:
        judged = c.verdict in (Verdict.PASS, Verdict.REGRESSION) or \
            judged_across_runs(c.verdict, c.note)
        # a ratio this run could not measure (a busy machine, too few waves left) is not
        # judged against the history either, and says so: never a silent pass
        unmeasured = c.verdict == Verdict.INFO and isinstance(c.note, str) and \
            c.note.startswith(NOT_MEASURED)
        if c.metric not in LATENCY or not (judged or unmeasured):
            continue
        wl, metric = c.workload, c.metric
        th = thresholds_for(wl)
        bar = bar_of(th, metric)
        thr = ("not gated (no bar)" if bar is None
               else f"+{bar:.0%} over the history's and significant")
        # baseline: the earlier ratios' geometric mean, candidate: this run's ratio, delta:
        # the one over the other, less 1
        kind = dict(delta_kind=DeltaKind.RELATIVE,
                    bar=NOT_GATED if bar is None else Bar(
                        kind=BarKind.MAX_RELATIVE_INCREASE, value=bar, alpha=th.alpha))
        if unmeasured:
            out.append(Check(wl, metric + SUFFIX, "ratio", None, None, None, None, None, thr,
                             "-", Verdict.INFO, f"not measured: this run measured no {metric} "
                             f"ratio ({c.note.removeprefix(NOT_MEASURED)})", **kind))
            continue
        if c.delta is None:
            continue
        now = 1 + c.delta
        if not db.is_file():
            out.append(Check(wl, metric + SUFFIX, "ratio", None, now, None, None, None, thr,
                             "-", Verdict.INFO, f"not measured: no history at {db} yet",
                             **kind))
            continue
        earlier = history.earlier_ratios(db, like, wl, metric)
        if len(earlier) < MIN_RUNS:
            out.append(Check(wl, metric + SUFFIX, "ratio", None, now, None, None, None, thr,
                             "-", Verdict.INFO,
                             f"not measured: {len(earlier)} earlier clean passing "
                             f"comparable run{'s' * (len(earlier) != 1)} with this ratio in "
                             f"{db}; the test needs {MIN_RUNS}", **kind))
            continue
        logs = np.log1p([d for _, d in earlier])
        x = math.log1p(c.delta)
        t = stats_across_runs.prediction_shift_t(logs, x)
        shift = math.expm1(x - float(np.mean(logs)))
        before = math.exp(float(np.mean(logs)))
        if bar is None or math.isnan(t.p_value):
            verdict = Verdict.INFO
        else:
            verdict = (Verdict.REGRESSION if t.p_value < th.alpha and shift > bar
                       else Verdict.PASS)
        out.append(Check(
            wl, metric + SUFFIX, "ratio", before, now, shift, None, t.p_value, thr,
            f"this run's candidate/baseline {metric} against the geometric mean of "
            f"{len(earlier)} earlier clean passing comparable runs' (log ratios); {t.method}",
            verdict, f"earlier ratios {', '.join(f'{1 + d:.3f}' for _, d in earlier[-5:])}"
            f"{' (newest 5)' if len(earlier) > 5 else ''}; newest run {earlier[-1][0]}",
            **kind))
    return out

