"""Candidate vs baseline: one check per metric, each with its method, CI, p-value and verdict.

A latency or accuracy regression must be statistically significant (at the suite's alpha)
AND beyond the suite's practical threshold; counts that are deterministic for a fixed
workload (syncs, state-audit violations) are compared directly.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from . import stats
from .execute import SideResult
from .suite import Thresholds

LATENCY_SOURCES = {   # metric (suite.LATENCY_METRICS) -> (table, column)
    "p99_ttft_ms": ("requests", "ttft_ms"), "p99_tpot_ms": ("requests", "tpot_ms"),
    "p99_itl_ms": ("itl", "itl_ms"), "p99_e2e_ms": ("requests", "e2e_ms"),
    "p99_step_ms": ("steps", "duration_ms"),
}
SUMMARY_FIELDS = {"ttft": ("requests", "ttft_ms"), "tpot": ("requests", "tpot_ms"),
                  "itl": ("itl", "itl_ms"), "e2e": ("requests", "e2e_ms"),
                  "step": ("steps", "duration_ms")}


@dataclass
class Check:
    workload: str
    metric: str
    unit: str
    baseline: float | None
    candidate: float | None
    delta: float | None
    ci: list[float] | None
    p_value: float | None
    threshold: str
    method: str
    verdict: str                 # pass | regression | info | error
    note: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("baseline", "candidate", "delta", "p_value"):
            if d[k] is not None and not math.isfinite(d[k]):
                d[k] = None
        if d["ci"] is not None:
            d["ci"] = [None if not math.isfinite(x) else x for x in d["ci"]]
        return d


def _samples(side: SideResult, table: str, column: str) -> np.ndarray:
    rows = getattr(side, table)
    x = np.array([r.get(column) for r in rows if r.get(column) is not None], dtype=float)
    return x[~np.isnan(x)]


def latency_summary(side: SideResult) -> dict[str, float]:
    """vLLM's field names: mean_ttft_ms, median_ttft_ms, p90_ttft_ms, p99_ttft_ms, ..."""
    out: dict[str, float] = {}
    for name, (table, col) in SUMMARY_FIELDS.items():
        s = stats.summarize_latency(_samples(side, table, col))
        for stat in ("mean", "median", "p90", "p99"):
            out[f"{stat}_{name}_ms"] = s[stat]
    out["output_tokens"] = float(sum(r.get("output_tokens") or 0 for r in side.requests))
    out["output_throughput"] = out["output_tokens"] / side.wall_s if side.wall_s else math.nan
    return out


def latency_check(wl: str, metric: str, base: SideResult, cand: SideResult,
                  th: Thresholds) -> Check:
    table, col = LATENCY_SOURCES[metric]
    b, c = _samples(base, table, col), _samples(cand, table, col)
    thr = f"+{th.latency_rel:.0%} and CI > 0"
    if len(b) < 2 or len(c) < 2:
        return Check(wl, metric, "ms", None, None, None, None, None, thr, "-", "info",
                     "fewer than 2 samples on a side")
    level = 1 - 2 * th.alpha                      # two-sided interval, one-sided decision
    rel = stats.ratio_percentile_ci_bootstrap(b, c, 99, level=level)
    mw = stats.mann_whitney_u(b, c, alternative="greater")
    bp, cp = stats.percentile(b, 99), stats.percentile(c, 99)
    regressed = rel.lo > 0 and rel.estimate > th.latency_rel
    return Check(wl, metric, "ms", bp, cp, rel.estimate, [rel.lo, rel.hi], mw.p_value, thr,
                 f"relative P99 change, {rel.method} ({level:.0%}); p: {mw.method}",
                 "regression" if regressed else "pass",
                 f"n = {len(b)} / {len(c)}")


def accuracy_check(wl: str, base: SideResult, cand: SideResult, th: Thresholds) -> Check | None:
    b = [r.get("correct_strict") for r in base.requests]
    c = [r.get("correct_strict") for r in cand.requests]
    if not b or any(x is None for x in b + c) or len(b) != len(c):
        return None
    mc = stats.mcnemar_exact(b, c)
    ci = stats.paired_diff_proportion_ci(b, c, level=1 - th.alpha)
    delta = float(np.mean(c) - np.mean(b))
    regressed = mc.p_value < th.alpha and delta < -th.accuracy_drop
    return Check(wl, "accuracy_strict", "fraction", float(np.mean(b)), float(np.mean(c)), delta,
                 [ci.lo, ci.hi], mc.p_value, f"-{th.accuracy_drop} and p < {th.alpha}",
                 f"{mc.method}; CI {ci.method}", "regression" if regressed else "pass",
                 f"n = {len(b)}; discordant: base-only {int((np.array(b) & ~np.array(c)).sum())}"
                 f", cand-only {int((~np.array(b) & np.array(c)).sum())}")


def agreement_check(wl: str, base: SideResult, cand: SideResult, th: Thresholds) -> Check:
    from .collectors.agreement import first_divergence
    div = [first_divergence(b, c) for b, c in zip(base.tokens, cand.tokens)]
    n, agree = len(div), sum(d == -1 for d in div)
    ci = stats.proportion_ci_wilson(agree, n, level=1 - 2 * th.alpha) if n else None
    rate = agree / n if n else math.nan
    regressed = ci is not None and ci.hi < th.agreement_min
    note = "greedy tokens equal for every request"
    if agree < n:
        first = min((d, i) for i, d in enumerate(div) if d >= 0)
        note = (f"{n - agree} of {n} requests diverge; earliest at output token {first[0]} "
                f"(request {first[1]}); median first divergence "
                f"{int(np.median([d for d in div if d >= 0]))}")
    return Check(wl, "token_agreement", "fraction", 1.0, rate, rate - 1.0 if n else None,
                 [ci.lo, ci.hi] if ci else None, None, f"CI upper < {th.agreement_min}",
                 "share of requests with identical greedy tokens; Wilson CI",
                 "regression" if regressed else "pass", note)


def _per_step_mean(side: SideResult, column: str) -> float | None:
    vals = [r[column] for r in side.profile if column in r]
    return float(np.mean(vals)) if vals else None


def sync_check(wl: str, base: SideResult, cand: SideResult, th: Thresholds) -> Check | None:
    b, c = _per_step_mean(base, "syncs_hot"), _per_step_mean(cand, "syncs_hot")
    if c is None:
        return None
    over_base = b is not None and c > b + th.syncs_increase
    over_budget = th.syncs_budget is not None and c > th.syncs_budget
    phases = ", ".join(f"{p} {np.mean([r[f'syncs_{p}'] for r in cand.profile]):.2f}"
                       for p in ("prepare", "forward", "sample", "postprocess", "output")
                       if cand.profile and f"syncs_{p}" in cand.profile[0])
    steps_with = sum(r["syncs_hot"] > 0 for r in cand.profile)
    thr = f"<= baseline + {th.syncs_increase}" + (
        f" and <= {th.syncs_budget}" if th.syncs_budget is not None else "")
    return Check(wl, "syncs_per_step", "syncs/step", b, c, None if b is None else c - b, None,
                 None, thr, "deterministic count in hot phases after warmup (torch.profiler)",
                 "regression" if over_base or over_budget else "pass",
                 f"candidate per phase: {phases}; {steps_with}/{len(cand.profile)} steps sync")


def count_info(wl: str, metric: str, column: str, base: SideResult, cand: SideResult) -> Check | None:
    b, c = _per_step_mean(base, column), _per_step_mean(cand, column)
    if b is None and c is None:
        return None
    return Check(wl, metric, "per step", b, c, None if b is None or c is None else c - b, None,
                 None, "-", "deterministic count (torch.profiler); runners differ by design",
                 "info")


def audit_check(wl: str, cand: SideResult, th: Thresholds) -> Check | None:
    if not cand.audits:
        return None
    bad = [a for a in cand.audits if a["max_slack"] > a["allowed_slack"]]
    note = "host mirror never ahead of the device truth by more than k"
    if bad:
        a = bad[0]
        note = (f"first violation: {a['instance']} step {a['step']}, mirror - truth = "
                f"{a['max_slack']} (allowed <= {a['allowed_slack']}); worst "
                f"{max(x['max_slack'] for x in bad)}")
    return Check(wl, "state_audit_violations", "steps", None, float(len(bad)), None, None, None,
                 f"<= {th.audit_violations}",
                 f"host mirror vs device truth after each of {len(cand.audits)} steps",
                 "regression" if len(bad) > th.audit_violations else "pass", note)


def compare(wl: str, base: SideResult, cand: SideResult, th: Thresholds) -> list[Check]:
    checks = [latency_check(wl, m, base, cand, th) for m in th.latency_metrics]
    checks += [accuracy_check(wl, base, cand, th), agreement_check(wl, base, cand, th),
               sync_check(wl, base, cand, th),
               count_info(wl, "ops_per_step", "ops", base, cand),
               count_info(wl, "allocs_per_step", "allocs", base, cand),
               audit_check(wl, cand, th)]
    return [c for c in checks if c is not None]
