"""Each stored run's latency checks pooled again over their engine pairs with the gate's
current pooling, beside the verdict the run stored.

A run over several engine pairs stores each pair's (log ratio, standard error) in the
check's `pairs` (summary.json). When the pooling changes, as when the gate went from
DerSimonian-Laird's normal CI to Hartung-Knapp-Sidik-Jonkman's t CI
(stats_across_runs.random_effects_mean_hksj), this says what every stored run would have
been judged, without running it again: the same estimates and errors, the run's own bar,
alpha and `pair_sd_rel` (its manifest's suite).

Usage: python research/pairs_repooled.py DIR [DIR ...]   (runs anywhere under the DIRs)
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

from mrbench.harness.checks.stats_across_runs import random_effects_mean_hksj
from mrbench.harness.record.results import read_run


def _repooled(check: dict, pair_sd_rel: float, alpha: float) -> tuple[float, float, str]:
    est, se = zip(*check["pairs"])
    pooled = random_effects_mean_hksj(est, se, math.log1p(pair_sd_rel), 1 - 2 * alpha)
    rel = math.expm1(pooled.estimate)
    bar = check["bar"]["value"]
    verdict = "regression" if pooled.p_greater < alpha and rel > bar else "pass"
    return rel, pooled.p_greater, verdict


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    args = ap.parse_args(argv)
    print(f"{'run':<22} {'check':<26} {'stored':>28}   {'pooled now':>28}")
    for d in args.dirs:
        for summary in sorted(d.rglob("summary.json")):
            manifest, s = read_run(summary.parent)
            th = manifest["suite"]["thresholds"]
            for c in s["checks"]:
                if len(c.get("pairs") or []) < 2 or (c.get("bar") or {}).get("value") is None:
                    continue                    # one pair: pooled as before; or not gated
                rel, p, verdict = _repooled(c, th.get("pair_sd_rel") or 0.0, th["alpha"])
                stored = f"{c['delta']:+.1%} p {c['p_value']:.2g} {c['verdict']}"
                print(f"{summary.parent.name:<22} {c['workload'] + '/' + c['metric']:<26} "
                      f"{stored:>28}   {rel:+.1%} p {p:.2g} {verdict:>10}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
