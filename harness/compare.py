"""Candidate vs baseline: one check per metric, each with its method, CI, p-value and verdict.

A latency or accuracy regression must be statistically significant (at the suite's alpha)
AND beyond the suite's practical threshold; counts that are deterministic for a fixed
workload (syncs, state-audit violations) are compared directly.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from mrbench.contract import SideResult

from . import references, stats
from .canary import MAX_OFF_CPU, off_cpu_share, wave_disturbed
from .collectors import prefill_chunks
from .collectors.agreement import first_divergence
from .phases import HOT_PHASES
from .references import count_means
from .metrics import LATENCY, SUMMARY_FIELDS
from .run_record import Check, Verdict
from .suite import Thresholds

def _samples(side: SideResult, table: str, column: str) -> np.ndarray:
    rows = getattr(side, table)
    x = np.array([r.get(column) for r in rows if r.get(column) is not None], dtype=float)
    return x[~np.isnan(x)]


def _effective_n(side: SideResult, table: str, samples: np.ndarray) -> int:
    """Independent samples behind a latency column. The requests of one batch step all get
    their token at the same moment, so their ITLs are one sample, not batch-size many: ITL
    counts at most one sample per timed step. An imported vllm bench run has no step table;
    its importer records a lower bound on the steps instead (harness/bench_import.py)."""
    if table != "itl":
        return len(samples)
    steps = len(side.steps) or int(side.resolved.get("itl_independent_samples") or 0)
    return min(len(samples), steps)


def _reported(side: SideResult, metric: str) -> float | None:
    """A P99 the side's source reported without samples (vllm bench serve's aggregates)."""
    v = (side.resolved.get("reported") or {}).get(metric)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def ruler_added_pct(side: SideResult) -> float | None:
    """What the slow-step ruler says it added: its busy time over the steps it slowed, as a
    share (%) of those steps' time without it. None without the ruler. Beside the gate's
    estimate of what the step moved, it tells a ruler that hid (busy time the device would
    have spent waiting anyway) from a gate that missed."""
    slowed = [(float(r["ruler_ms"]), float(r["duration_ms"])) for r in side.steps
              if (r.get("ruler_ms") or 0) > 0]          # NaN > 0 is False
    if not slowed:
        return None
    return 100 * sum(a for a, _ in slowed) / sum(d - a for a, d in slowed)


def latency_summary(side: SideResult) -> dict[str, Any]:
    """vLLM's field names: mean_ttft_ms, median_ttft_ms, p90_ttft_ms, p99_ttft_ms, ..."""
    out: dict[str, float] = {}
    for name, (table, col) in SUMMARY_FIELDS.items():
        s = stats.summarize_latency(_samples(side, table, col))
        for stat in ("mean", "median", "p90", "p99"):
            out[f"{stat}_{name}_ms"] = s[stat]
    steps = _samples(side, "steps", "duration_ms")
    for q in (50, 90, 99):                      # distribution-free CIs of the step percentiles
        ci = stats.percentile_ci_order_statistic(steps, q, level=0.95)
        out[f"p{q}_step_ms_ci95"] = [ci.lo, ci.hi]
    for name in ("queue", "kv_handoff", "prefill"):
        s = stats.summarize_latency(_samples(side, "requests", f"{name}_ms"))
        if s["n"]:
            out[f"mean_{name}_ms"], out[f"p99_{name}_ms"] = s["mean"], s["p99"]
    ruler = ruler_added_pct(side)
    if ruler is not None:
        out["ruler_added_pct"] = ruler
    out["output_tokens"] = float(sum(r.get("output_tokens") or 0 for r in side.requests))
    out["output_throughput"] = out["output_tokens"] / side.wall_s if side.wall_s else math.nan
    out.update(side.counters)
    out.update(spec_summary(side))
    return out


MIN_WAVES = 6          # a one-sided signed-rank test at alpha 0.05 needs >= 5 blocks; 6 has room
MIN_PER_WAVE = {99: 50, 50: 5}   # independent samples behind each wave's P99 / median


def _per_wave(side: SideResult, table: str, column: str) -> dict[int, np.ndarray]:
    rows = getattr(side, table)
    out: dict[int, list[float]] = {}
    for r in rows:
        v, w = r.get(column), r.get("wave")
        if v is not None and w is not None and not (isinstance(v, float) and math.isnan(v)):
            out.setdefault(int(w), []).append(float(v))
    return {w: np.array(v) for w, v in out.items()}


def _wave_n(side: SideResult, table: str, wave: int, samples: np.ndarray) -> int:
    if table != "itl":
        return len(samples)
    return min(len(samples), sum(1 for s in side.steps if s.get("wave") == wave))


def _disturbed(side: SideResult) -> dict[int, bool] | None:
    """Wave -> whether the machine took a whole step's time from one of this side's steps
    of it (canary.wave_disturbed); None where the run had no canary; a wave is missing where
    the canary read nothing for it (stopped, or its stamps did not reach these steps)."""
    if not any("machine_lost_ms" in r for r in side.steps):
        return None
    lost: dict[int, list[float]] = {}
    dur: dict[int, list[float]] = {}
    for r in side.steps:
        w, x = r.get("wave"), r.get("machine_lost_ms")
        if w is None:
            continue
        lost.setdefault(int(w), []).append(math.nan if x is None else float(x))
        dur.setdefault(int(w), []).append(float(r["duration_ms"]))
    out = {w: wave_disturbed(np.array(lost[w]), np.array(dur[w])) for w in lost}
    return {w: d for w, d in out.items() if d is not None}


GUARD_SHARE = 0.2     # the canary guard tests at this share of the gate's alpha (below)


def undisturbed_waves(base: SideResult, cand: SideResult, waves: list[int], alpha: float
                      ) -> tuple[list[int], str]:
    """The waves a per-wave latency test may use, and a note saying what was left out.

    A wave in which the canary saw the machine itself take a whole step's time from one of
    the steps (canary.wave_disturbed) on either side is not evidence about the runners: its
    P99 is the machine's burst (docs/detection-power.md, "Bursts"). Such waves are left
    out, unless the candidate's waves were disturbed more often than the baseline's
    (one-sided exact sign test on the waves disturbed on one side only): then the
    disturbance may be the candidate's own doing (a host-side storm it causes), and every
    wave is kept.

    The guard tests at GUARD_SHARE x `alpha` (0.01 at the suites' 0.05), not at `alpha`:
    on a machine with bursts every firing by chance puts the bursts back on one side, so
    the guard's own level adds to the gate's false alarms. An H100 A/A run had the
    candidate disturbed in 12 waves and the baseline in 4 (p = 0.038): at 0.05 the guard
    kept every wave and the P99 step read +5.6 % (a false alarm), on the 80 undisturbed
    waves +1.1 %. A storm the candidate causes is lopsided far beyond that: 8 waves of 24
    against none is p = 0.004."""
    mb, mc = _disturbed(base), _disturbed(cand)
    if mb is None and mc is None:
        return waves, ""
    unread = [w for w in waves if w not in (mb or {}) or w not in (mc or {})]
    if unread:
        return waves, (f"; canary: no reading for {len(unread)} of {len(waves)} waves (it "
                       "stopped, or its ring did not reach them), so all waves kept")
    db = {w for w in waves if mb[w]}
    dc = {w for w in waves if mc[w]}
    if not db | dc:
        return waves, f"; canary: the machine ran at its usual speed in all {len(waves)} waves"
    guard = stats.sign_test_exact(len(dc - db), len(db - dc), alternative="greater")
    if guard.p_value < GUARD_SHARE * alpha:
        return waves, (f"; canary: the machine ran slow in {len(dc)} of the candidate's waves "
                       f"and {len(db)} of the baseline's (p = {guard.p_value:.2g}, "
                       f"{guard.method}): possibly the candidate's doing, so all waves kept")
    kept = [w for w in waves if w not in db | dc]
    return kept, (f"; canary: {len(db | dc)} of {len(waves)} waves left out, the machine "
                  f"took a whole step's time from a step of them (baseline {len(db)}, "
                  f"candidate {len(dc)})")


def _order_note(cand: SideResult, table: str, waves: list[int], logr: np.ndarray,
                level: float) -> str:
    """The run-order diagnostic of a blocked latency check, for its note (not its verdict).

    ABBA puts the candidate first in half the waves and second in the other half. A cost of
    running second (clocks, caches, the other side's garbage) adds +d to one half's log
    ratios and -d to the other's: the test stays fair but its noise grows. Estimated as
    the mean of each wave's log ratio signed by the candidate's place (+1: second), and
    removed by averaging each AB wave with the BA wave after it (a crossover pair): the
    pairs' Hodges-Lehmann CI is what the same test would give free of the order effect.
    Empty when the rows carry no `wave_pos` (results from before it was recorded)."""
    pos: dict[int, int] = {}
    for r in getattr(cand, table):
        w, p = r.get("wave"), r.get("wave_pos")
        if w is not None and p is not None and not (isinstance(p, float) and math.isnan(p)):
            pos.setdefault(int(w), int(p))
    if any(w not in pos for w in waves):
        return ""
    sign = np.array([1.0 if pos[w] == 1 else -1.0 for w in waves])
    if abs(sign.sum()) == len(sign):
        return ""
    d = float(np.mean(logr * sign))
    at = {w: i for i, w in enumerate(waves)}
    pairs = [(logr[at[w]] + logr[at[w + 1]]) / 2 for w in waves
             if w % 2 == 0 and w + 1 in at and pos[w] != pos[w + 1]]
    out = f"; run order: second in a wave {math.expm1(d):+.1%} vs first"
    if len(pairs) >= 2:
        hl = stats.hodges_lehmann_ci_signed_rank(pairs, level=level)
        lo, hi = math.expm1(hl.lo), math.expm1(hl.hi)
        out += (f"; order-adjusted over {len(pairs)} AB/BA pairs {math.expm1(hl.estimate):+.1%}"
                f" [{lo:+.1%}, {hi:+.1%}]")
    return out


def latency_check(wl: str, metric: str, base: SideResult, cand: SideResult,
                  th: Thresholds) -> Check:
    """P99 (or median) regression, judged per interleaved wave when there are enough waves.

    Blocked design: both sides ran each wave back to back (ABBA), so a wave's P99 ratio is
    free of the machine's drift; the decision is a one-sided Wilcoxon signed-rank test over
    the waves' log ratios, the effect their Hodges-Lehmann estimate. A burst that hits one
    side of one wave moves one rank. Without enough waves (or samples per wave), the pooled
    P99s are compared by bootstrap, and a P99 of too few samples is reported, not judged.
    `median_*` metrics are the same test on each wave's median, against `median_rel`: a
    uniform slowdown moves every step's time, noise mostly a tail. They are judged only
    blocked (a pooled median would carry the machine's drift), and only where the suite
    sets `median_rel` (runners differ in their typical step: calibrate it per suite)."""
    table, col, q = LATENCY[metric].table, LATENCY[metric].column, LATENCY[metric].quantile
    name = "median" if q == 50 else f"P{q}"
    rel_min = th.median_rel if q == 50 else th.latency_rel
    b, c = _samples(base, table, col), _samples(cand, table, col)
    thr = "not gated (no median_rel)" if rel_min is None else f"+{rel_min:.0%} and significant"
    if len(b) < 2 or len(c) < 2:
        rb = stats.percentile(b, q) if len(b) >= 2 else _reported(base, metric)
        rc = stats.percentile(c, q) if len(c) >= 2 else _reported(cand, metric)
        if rb is not None and rc is not None:     # a side has only its source's figure
            return Check(wl, metric, "ms", rb, rc, rc / rb - 1 if rb else None, None, None,
                         thr, f"reported {name}s (a side has no per-request samples)", Verdict.INFO,
                         "aggregates only (vllm bench serve without --save-detailed): "
                         "no samples, no statistical test; reported, not judged")
        return Check(wl, metric, "ms", None, None, None, None, None, thr, "-", Verdict.INFO,
                     "fewer than 2 samples on a side")
    level = 1 - 2 * th.alpha                      # two-sided interval, one-sided decision
    bp, cp = stats.percentile(b, q), stats.percentile(c, q)
    bw, cw = _per_wave(base, table, col), _per_wave(cand, table, col)
    waves = sorted(w for w in set(bw) & set(cw)
                   if min(_wave_n(base, table, w, bw[w]), _wave_n(cand, table, w, cw[w]))
                   >= MIN_PER_WAVE[q])
    usable = len(waves)
    waves, canary_note = undisturbed_waves(base, cand, waves, th.alpha)
    if len(waves) < MIN_WAVES <= usable:
        return Check(wl, metric, "ms", bp, cp, cp / bp - 1 if bp else None, None, None, thr,
                     "-", Verdict.INFO, f"not measured: under {MIN_WAVES} waves left{canary_note}")
    if len(waves) >= MIN_WAVES:
        logr = np.log([stats.percentile(cw[w], q) / stats.percentile(bw[w], q)
                       for w in waves])
        hl = stats.hodges_lehmann_ci_signed_rank(logr, level=level)
        wx = stats.wilcoxon_signed_rank(logr, alternative="greater")
        rel, lo, hi = (math.expm1(x) for x in (hl.estimate, hl.lo, hl.hi))
        note = (f"pooled {name} {bp:.3g} -> {cp:.3g} ms; waves with a higher candidate "
                f"{name}: {int((logr > 0).sum())}/{len(waves)}"
                f"{_order_note(cand, table, waves, logr, level)}{canary_note}")
        if rel_min is None:
            verdict = Verdict.INFO
            note = f"reported, not gated: the suite sets no median_rel; {note}"
        else:
            verdict = (Verdict.REGRESSION if wx.p_value < th.alpha and rel > rel_min
                       else Verdict.PASS)
        return Check(wl, metric, "ms", bp, cp, rel, [lo, hi], wx.p_value, thr,
                     f"per-wave {name} ratio over {len(waves)} ABBA waves: {hl.method} "
                     f"({level:.0%}); p: {wx.method}", verdict, note)
    if q == 50:
        return Check(wl, metric, "ms", bp, cp, cp / bp - 1 if bp else None, None, None, thr,
                     "-", Verdict.INFO, f"{len(waves)} usable waves (>= {MIN_PER_WAVE[q]} samples "
                     f"each): a median is judged per ABBA wave only, >= {MIN_WAVES} waves; "
                     f"reported, not judged{canary_note}")
    n_min = stats.min_samples_percentile_ci(q, level)
    n_eff = min(_effective_n(base, table, b), _effective_n(cand, table, c))
    if n_eff < n_min:
        return Check(wl, metric, "ms", bp, cp, None, None, None, thr, "-", Verdict.INFO,
                     f"n = {len(b)} / {len(c)} ({n_eff} independent), {len(waves)} usable "
                     f"waves: a {name} needs >= {n_min} per side for a bounded {level:.0%} CI "
                     f"(order statistics) or >= {MIN_WAVES} waves; reported, not judged")
    shared = sorted(set(bw) & set(cw))
    if len(shared) >= MIN_WAVES:
        # too few samples a wave for a per-wave P99, but waves: the requests of a wave share
        # its machine state, so whole waves are resampled (a request bootstrap would take
        # them as independent and false-alarm; docs/detection-power.md, "Noise anatomy")
        shared, canary_note = undisturbed_waves(base, cand, shared, th.alpha)
        if len(shared) < MIN_WAVES:
            return Check(wl, metric, "ms", bp, cp, cp / bp - 1 if bp else None, None, None,
                         thr, "-", Verdict.INFO,
                         f"not measured: under {MIN_WAVES} waves left{canary_note}")
        rel = stats.ratio_percentile_ci_wave_bootstrap([bw[w] for w in shared],
                                                       [cw[w] for w in shared], q, level=level)
        regressed = rel.lo > 0 and rel.estimate > rel_min
        return Check(wl, metric, "ms", bp, cp, rel.estimate, [rel.lo, rel.hi], None, thr,
                     f"pooled relative {name} change over {len(shared)} ABBA waves, "
                     f"{rel.method} ({level:.0%}); decided by the CI's lower bound",
                     Verdict.REGRESSION if regressed else Verdict.PASS,
                     f"n = {len(b)} / {len(c)}; under {MIN_PER_WAVE[q]} samples a wave, so "
                     f"waves are resampled whole rather than compared one by one{canary_note}")
    rel = stats.ratio_percentile_ci_bootstrap(b, c, q, level=level)
    mw = stats.mann_whitney_u(b, c, alternative="greater")
    regressed = rel.lo > 0 and rel.estimate > rel_min
    return Check(wl, metric, "ms", bp, cp, rel.estimate, [rel.lo, rel.hi], mw.p_value, thr,
                 f"pooled relative {name} change, {rel.method} ({level:.0%}); p: {mw.method}",
                 Verdict.REGRESSION if regressed else Verdict.PASS,
                 f"n = {len(b)} / {len(c)}; fewer than {MIN_WAVES} waves, so not blocked")


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
                 f"{mc.method}; CI {ci.method}", Verdict.REGRESSION if regressed else Verdict.PASS,
                 f"n = {len(b)}; discordant: base-only {int((np.array(b) & ~np.array(c)).sum())}"
                 f", cand-only {int((~np.array(b) & np.array(c)).sum())}")


def agreement_check(wl: str, base: SideResult, cand: SideResult,
                    th: Thresholds) -> Check | None:
    div = [first_divergence(b, c) for b, c in zip(base.tokens, cand.tokens)]
    n, agree = len(div), sum(d == -1 for d in div)
    if n == 0:                    # no tokens on a side (an imported vllm bench run): no check
        return None
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
                 Verdict.REGRESSION if regressed else Verdict.PASS, note)


SAMPLED_STATS = ("distinct_streams", "output_tokens", "accuracy_strict")


def is_sampled(side: SideResult) -> bool:
    """The workload sampled several streams per prompt (rows carry `sample_group`)."""
    return any("sample_group" in r for r in side.requests)


def _sampled_groups(side: SideResult) -> dict[int, dict[str, float]]:
    """Per prompt with >= 2 samples: the share of distinct streams, the mean output length
    and the strict accuracy of its samples (and `streams`, the number of distinct ones)."""
    groups: dict[int, list[int]] = {}
    for i, r in enumerate(side.requests):
        if r.get("sample_group") is not None and r.get("fits_context", True) \
                and i < len(side.tokens):
            groups.setdefault(int(r["sample_group"]), []).append(i)
    out = {}
    for g, idx in groups.items():
        if len(idx) < 2:
            continue
        toks = [tuple(side.tokens[i]) for i in idx]
        out[g] = dict(streams=len(set(toks)), distinct_streams=len(set(toks)) / len(toks),
                      output_tokens=float(np.mean([len(t) for t in toks])),
                      accuracy_strict=float(np.mean([bool(side.requests[i].get("correct_strict"))
                                                     for i in idx])))
    return out


def min_sampled_prompts(alpha: float, tests: int = len(SAMPLED_STATS)) -> int:
    """Prompts a two-sided sign-flip test needs before its smallest p (2 / 2^n) can fall
    below alpha / tests (Bonferroni)."""
    return math.ceil(math.log2(2 * tests / alpha) + 1e-9)


def sampled_check(wl: str, base: SideResult, cand: SideResult, th: Thresholds) -> Check | None:
    """Sampled distributions, paired by prompt: for each prompt, the share of distinct
    streams among its samples, their mean length and their accuracy, candidate minus
    baseline; a two-sided sign-flip permutation test per statistic (exact under H0: one
    prompt's samples on the two runners are exchangeable), Bonferroni over the three. A
    runner that shares random noise across rows collapses distinct streams; one that
    mis-applies temperature or top-k/top-p moves lengths and accuracy. Valid whether or not
    the two runners' samplers promise equal streams (equal streams give p = 1)."""
    if not is_sampled(cand):
        return None
    b, c = _sampled_groups(base), _sampled_groups(cand)
    common = sorted(set(b) & set(c))
    k = len(SAMPLED_STATS)
    thr = f"p < {th.alpha} (two-sided, Bonferroni over {k})"
    need = min_sampled_prompts(th.alpha, k)
    if len(common) < need:
        return Check(wl, "sampled_distribution", "per prompt", None, None, None, None, None,
                     thr, "-", Verdict.INFO, f"not measured: {len(common)} prompts with >= 2 "
                     f"samples on both sides; the sign-flip test needs >= {need} to reach "
                     f"alpha / {k}")
    if not any(b[g]["streams"] > 1 for g in common):
        return Check(wl, "sampled_distribution", "per prompt", None, None, None, None, None,
                     thr, "-", Verdict.INFO, f"not measured: every one of the {len(common)} "
                     "prompts gave a single stream on the baseline (a setting this cold is "
                     "greedy in effect: shared or broken noise would not show)")
    tests = {}
    for name in SAMPLED_STATS:
        d = [c[g][name] - b[g][name] for g in common]
        tests[name] = (float(np.mean([b[g][name] for g in common])),
                       float(np.mean([c[g][name] for g in common])),
                       stats.sign_flip_test_paired(d, alternative="two-sided"))
    worst = min(SAMPLED_STATS, key=lambda n: tests[n][2].p_value)
    bm, cm, t = tests[worst]
    p_adj = min(1.0, t.p_value * k)
    note = "; ".join(f"{n} {tests[n][0]:.3g} -> {tests[n][1]:.3g} (p {tests[n][2].p_value:.3g})"
                     for n in SAMPLED_STATS)
    return Check(wl, "sampled_distribution", f"{worst} (mean per prompt)", bm, cm, cm - bm,
                 None, p_adj, thr,
                 f"per-prompt statistics over {len(common)} prompts, paired by prompt; "
                 f"{t.method}; smallest p x {k} (Bonferroni)",
                 Verdict.REGRESSION if p_adj < th.alpha else Verdict.PASS, note)


def token_parity(base_tokens: list[list[int]], cand_tokens: list[list[int]]) -> tuple[int, int]:
    """(equal, total) greedy output tokens, position by position; a token past the shorter
    output counts as unequal (total = the longer of each pair)."""
    equal = total = 0
    for b, c in zip(base_tokens, cand_tokens):
        equal += sum(x == y for x, y in zip(b, c))
        total += max(len(b), len(c))
    return equal, total


def parity_check(wl: str, base: SideResult, cand: SideResult, th: Thresholds) -> Check:
    """Cross-engine parity on the same weights: the share of greedy output tokens two engines
    agree on. Token-level, not request-level: engines differ in kernels, so a near-tie may flip
    once in a long output (and everything after it), which a request-level share would count
    as a whole failed request."""
    eq, total = token_parity(base.tokens, cand.tokens)
    rate = eq / total if total else math.nan
    div = [first_divergence(b, c) for b, c in zip(base.tokens, cand.tokens)]
    same = sum(d == -1 for d in div)
    note = f"{same} of {len(div)} requests identical"
    if same < len(div):
        first = min((d, i) for i, d in enumerate(div) if d >= 0)
        note += f"; earliest divergence at output token {first[0]} (request {first[1]})"
    return Check(wl, "cross_engine_parity", "fraction", 1.0, rate,
                 None if not total else rate - 1.0, None, None, f">= {th.parity_min}",
                 f"share of equal greedy tokens, {base.resolved.get('target')} vs "
                 f"{cand.resolved.get('target')}, same weights ({eq}/{total})",
                 Verdict.REGRESSION if total and rate < th.parity_min else Verdict.PASS, note)


def _per_step_mean(side: SideResult, column: str) -> float | None:
    vals = [r[column] for r in side.profile if column in r]
    return float(np.mean(vals)) if vals else None


def not_measured(side: SideResult, name: str) -> str | None:
    """Why a side's per-phase counts measured nothing, or None if every hot phase was seen
    to run. Zero syncs is a measurement only when the phases it counts in were seen to run;
    a runner whose phase labels did not attach would otherwise pass by construction."""
    if not side.profile:
        return f"not measured: no profiled step on the {name}"
    if f"ran_{HOT_PHASES[0]}" not in side.profile[0]:
        return None                              # counted before phases were checked
    dead = [p for p in HOT_PHASES if not any(r.get(f"ran_{p}") for r in side.profile)]
    if not dead:
        return None
    probe = side.resolved.get("phase_probe") or {}
    missing = probe.get("missing")
    return (f"not measured: the {name}'s {', '.join(dead)} phase"
            f"{'s' if len(dead) > 1 else ''} never ran in {len(side.profile)} profiled steps "
            f"(runner {side.resolved.get('runner_class') or side.resolved.get('runner')}"
            + (f"; labels that did not attach: {', '.join(missing)}" if missing else "") + ")")


def _unmeasured_check(wl: str, metric: str, unit: str, why: str, threshold: str) -> Check:
    return Check(wl, metric, unit, None, None, None, None, None, threshold,
                 "deterministic count in the harness's phase ranges (torch.profiler)",
                 Verdict.ERROR, why)


def sync_check(wl: str, base: SideResult, cand: SideResult, th: Thresholds,
               relative: bool = True) -> Check | None:
    """Hot-path syncs per step: over the baseline (same engine only) or over the budget of a
    runner that promises a sync-free hot path."""
    if not cand.profile and not base.profile:
        return None                              # the workload profiles nothing
    thr = f"<= baseline + {th.syncs_increase}" + (
        f" and <= {th.syncs_budget}" if th.syncs_budget is not None else "")
    why = not_measured(cand, "candidate") or (relative and not_measured(base, "baseline"))
    if why:
        return _unmeasured_check(wl, "syncs_per_step", "syncs/step", why, thr)
    b, c = _per_step_mean(base, "syncs_hot"), _per_step_mean(cand, "syncs_hot")
    over_base = relative and b is not None and c > b + th.syncs_increase
    # the absolute budget binds runners that promise a sync-free hot path (MRv2); a V1
    # candidate (an A/A calibration) is held to its baseline only
    over_budget = th.syncs_budget is not None and c > th.syncs_budget \
        and cand.resolved.get("sync_free", True)
    phases = ", ".join(f"{p} {np.mean([r[f'syncs_{p}'] for r in cand.profile]):.2f}"
                       for p in ("prepare", "forward", "sample", "postprocess", "output")
                       if cand.profile and f"syncs_{p}" in cand.profile[0])
    steps_with = sum(r["syncs_hot"] > 0 for r in cand.profile)
    return Check(wl, "syncs_per_step", "syncs/step", b, c, None if b is None else c - b, None,
                 None, thr, "deterministic count in hot phases after warmup (torch.profiler)",
                 Verdict.REGRESSION if over_base or over_budget else Verdict.PASS,
                 f"candidate per phase: {phases}; {steps_with}/{len(cand.profile)} steps sync")


def sync_warnings_check(wl: str, base: SideResult, cand: SideResult, th: Thresholds
                        ) -> Check | None:
    """vLLM's own sync checker (`--vllm-sync-check warn`): its warnings per step on the
    candidate. A runner that promises a sync-free hot path is held to the sync budget; any
    candidate to its baseline. Not measured when the checker never armed on a side."""
    if "sync_check_warnings" not in cand.counters:
        return None                              # the checker was not asked for
    thr = "<= baseline" + (f" and <= {th.syncs_budget}/step" if th.syncs_budget is not None
                           else "")
    for side, name in ((cand, "candidate"), (base, "baseline")):
        if not side.counters.get("sync_check_armed"):
            return _unmeasured_check(
                wl, "sync_check_warnings", "warnings/step",
                f"not measured: vLLM's VLLM_GPU_SYNC_CHECK never armed on the {name} (vLLM "
                "arms it on CUDA only, after warmup)", thr)

    def per_step(side: SideResult) -> float:
        steps = max(1, int(side.counters.get("sync_check_steps") or len(side.steps) or 1))
        return side.counters.get("sync_check_warnings", 0.0) / steps
    b, c = per_step(base), per_step(cand)
    over_budget = th.syncs_budget is not None and c > th.syncs_budget \
        and cand.resolved.get("sync_free", True)
    sites = cand.resolved.get("sync_check_sites") or {}
    note = "no synchronizing CUDA operation reported on the candidate"
    if cand.counters.get("sync_check_warnings"):
        note = (f"{int(cand.counters['sync_check_warnings'])} warnings over "
                f"{int(cand.counters.get('sync_check_steps') or 0)} steps")
    return Check(wl, "sync_check_warnings", "warnings/step", b, c, c - b, None, None, thr,
                 "vLLM's VLLM_GPU_SYNC_CHECK=warn around execute_model/sample_tokens, counted "
                 "per step over the timed waves", Verdict.REGRESSION if c > b or over_budget
                 else Verdict.PASS, note + (f"; sites: {sites}" if sites else ""))


def count_info(wl: str, metric: str, column: str, base: SideResult,
               cand: SideResult) -> Check | None:
    b, c = _per_step_mean(base, column), _per_step_mean(cand, column)
    if b is None and c is None:
        return None
    why = not_measured(cand, "candidate") or not_measured(base, "baseline")
    if why:
        return _unmeasured_check(wl, metric, "per step", why, "-")
    why = ("one runner on both sides: judged per phase by ops_vs_baseline"
           if same_runner(base, cand) else "runners differ by design")
    return Check(wl, metric, "per step", b, c, None if b is None or c is None else c - b, None,
                 None, "-", f"deterministic count (torch.profiler); {why}", Verdict.INFO)


def _count_excess(now: dict[str, float], ref: dict[str, float],
                  th: Thresholds) -> tuple[dict[str, float], str]:
    """({column: excess} over the bars, a line listing every count that moved): per phase
    ops (`ops_*`) and allocations; the total `ops` is shown, its phases are judged."""
    over = {c: now[c] - ref[c] for c in now if c in ref and c != "ops"
            and now[c] - ref[c] > (th.allocs_increase if c == "allocs" else th.ops_increase)}
    diffs = ", ".join(f"{c} {ref[c]:.1f} -> {now[c]:.1f}" for c in now
                      if c in ref and abs(now[c] - ref[c]) > 1e-9) or "identical counts"
    return over, diffs


def same_runner(base: SideResult, cand: SideResult) -> bool:
    """Both sides run one runner of one engine: two builds of it, or one build against
    itself. Their counts are then one code at two versions, so the baseline is the
    reference (counts_vs_baseline), not a stored file."""
    runner = base.resolved.get("runner")
    return not cross_engine(base, cand) and runner is not None and \
        runner == cand.resolved.get("runner")


def counts_vs_baseline(wl: str, base: SideResult, cand: SideResult,
                       th: Thresholds) -> Check | None:
    """Ops per phase and allocations per step, candidate against baseline, when both run
    the same runner: a count is deterministic for a fixed batch sequence, so one extra op a
    step shows without noise. Gated only when both profiled passes ran the same number of
    steps (the same batch sequence); otherwise reported."""
    now, ref = count_means(cand.profile), count_means(base.profile)
    if not now and not ref:
        return None
    thr = f"per phase <= baseline + {th.ops_increase} (allocs + {th.allocs_increase})"
    why = not_measured(cand, "candidate") or not_measured(base, "baseline")
    if why:
        return _unmeasured_check(wl, "ops_vs_baseline", "per step", why, thr)
    over, diffs = _count_excess(now, ref, th)
    check = Check(wl, "ops_vs_baseline", "per step", ref.get("ops"), now.get("ops"),
                  None if "ops" not in ref or "ops" not in now else now["ops"] - ref["ops"],
                  None, None, thr, "deterministic count (torch.profiler), candidate against "
                  "baseline: the same runner on both sides",
                  Verdict.REGRESSION if over else Verdict.PASS, diffs)
    if len(base.profile) != len(cand.profile):
        return _not_gated(check, f"not the same batch sequence ({len(base.profile)} vs "
                                 f"{len(cand.profile)} profiled steps)")
    return check


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
                 Verdict.REGRESSION if len(bad) > th.audit_violations else Verdict.PASS, note)


def reference_check(wl: str, cand: SideResult, reference: dict | None,
                    th: Thresholds) -> Check | None:
    """Candidate ops (per phase) and allocations per step vs its own stored reference."""
    now = count_means(cand.profile)
    if not now:
        return None
    why = not_measured(cand, "candidate")
    if why:
        return _unmeasured_check(wl, "ops_vs_reference", "per step", why,
                                 f"<= reference + {th.ops_increase}")
    if reference is None:
        return Check(wl, "ops_vs_reference", "per step", None, now.get("ops"), None, None, None,
                     f"<= reference + {th.ops_increase}", "deterministic count (torch.profiler)",
                     Verdict.INFO, "no stored reference for this build and workload "
                     "(mrbench run ... --save-reference)")
    stale = references.key_mismatch(reference, cand.resolved)
    if stale:
        return Check(wl, "ops_vs_reference", "per step", None, now.get("ops"), None, None,
                     None, f"<= reference + {th.ops_increase}",
                     "deterministic count (torch.profiler)", Verdict.INFO,
                     f"not measured: the stored reference is for another build ({stale})")
    ref = reference["counts"]
    over, diffs = _count_excess(now, ref, th)
    return Check(wl, "ops_vs_reference", "per step", ref.get("ops"), now.get("ops"),
                 None if "ops" not in ref else now["ops"] - ref["ops"], None, None,
                 f"per phase <= reference + {th.ops_increase} (allocs + {th.allocs_increase})",
                 f"deterministic count vs the stored reference of {reference.get('git_sha') or '?'}"
                 f" ({reference.get('steps')} steps)",
                 Verdict.REGRESSION if over else Verdict.PASS, diffs)


def dispatch_check(wl: str, base: SideResult, cand: SideResult) -> Check | None:
    """Serving dispatch classes the warmup never ran (their first use pays compile/capture)."""
    def unwarmed(side: SideResult) -> list[str]:
        warm = {r["kind"] for r in side.dispatch if r["phase"] == "warmup"}
        return sorted({r["kind"] for r in side.dispatch if r["phase"] == "serve"} - warm)
    if not cand.dispatch:
        return None
    b, c = unwarmed(base) if base.dispatch else None, unwarmed(cand)
    seen = sorted({r["kind"] for r in cand.dispatch if r["phase"] == "serve"})
    note = (f"never warmed: {', '.join(c)}" if c else "every serving class was warmed") + \
        f"; serving classes: {', '.join(seen)}"
    return Check(wl, "unwarmed_dispatch", "classes", None if b is None else float(len(b)),
                 float(len(c)), None, None, None, "0", "serving dispatch classes minus warmup's",
                 Verdict.REGRESSION if c else Verdict.PASS, note)


def spec_summary(side: SideResult) -> dict[str, float]:
    """vLLM's spec-decode figures: acceptance rate, mean acceptance length, per position.
    From per-request counts (bundled) or the engine's counters (vLLM's
    `vllm:spec_decode_num_drafts`, `..._num_draft_tokens`, `..._num_accepted_tokens`,
    `..._num_accepted_tokens_per_pos`, summed over the timed waves)."""
    rows = [r for r in side.requests if r.get("num_drafts") is not None]
    if not rows and side.counters.get("spec_num_drafts"):
        k = side.counters
        rows = [dict(num_drafts=k["spec_num_drafts"],
                     num_draft_tokens=k.get("spec_num_draft_tokens", 0),
                     num_accepted_tokens=k.get("spec_num_accepted_tokens", 0),
                     **{f"accepted_pos_{key.rsplit('_', 1)[1]}": v for key, v in k.items()
                        if key.startswith("spec_accepted_pos_")})]
    drafts = sum(r["num_drafts"] or 0 for r in rows)
    if not drafts:
        return {}
    dt = sum(r["num_draft_tokens"] or 0 for r in rows)
    acc = sum(r["num_accepted_tokens"] or 0 for r in rows)
    out = dict(num_drafts=float(drafts), num_draft_tokens=float(dt),
               num_accepted_tokens=float(acc), acceptance_rate=acc / dt if dt else math.nan,
               mean_acceptance_length=1 + acc / drafts)
    j = 0
    while any(f"accepted_pos_{j}" in r for r in rows):
        out[f"acceptance_rate_pos_{j}"] = sum(r.get(f"accepted_pos_{j}") or 0
                                              for r in rows) / drafts
        j += 1
    return out


def _speculated(side: SideResult) -> bool:
    """The side's engine had spec decoding (its drafts were counted, zero or not)."""
    return (any(r.get("num_drafts") is not None for r in side.requests)
            or "spec_num_drafts" in side.counters)


def per_request_al(side: SideResult) -> dict[int, float]:
    """req_index -> that request's own AL (1 + accepted / drafts), for the requests that
    verified at least one draft; empty when the side has engine-wide counters only."""
    out: dict[int, float] = {}
    for r in side.requests:
        i, d, a = r.get("req_index"), r.get("num_drafts"), r.get("num_accepted_tokens")
        if i is None or d is None or a is None or not float(d) > 0 or math.isnan(float(a)):
            continue
        out[int(i)] = 1.0 + float(a) / float(d)
    return out


def spec_check(wl: str, base: SideResult, cand: SideResult,
               th: Thresholds | None = None) -> Check | None:
    """Mean acceptance length (AL = 1 + accepted / drafts, vLLM's definition): a
    regression when the candidate's AL falls by more than `acceptance_drop` AND the fall is
    significant at alpha. Paired over requests (the same prompt on both sides, by
    req_index): each request's AL ratio, a one-sided Wilcoxon signed-rank test (candidate
    lower) and the Hodges-Lehmann estimate of the relative change, with its CI. A change in
    acceptance the tokens do not show (a sampler that rejects drafts it should accept) is
    seen nowhere else. Reported, not judged, where the test cannot reach alpha: too few
    requests that drafted on both sides, a baseline without drafts, or only engine-wide
    counters (vLLM), which give one AL per side and no pairs. A candidate that made no
    drafts where the baseline did is "not measured" (an error), never a pass."""
    th = th or Thresholds()
    metric, unit = "mean_acceptance_length", "tokens/step"
    thr = f"-{th.acceptance_drop:.0%} and p < {th.alpha}"
    b, c = spec_summary(base), spec_summary(cand)
    if not c:
        if not _speculated(cand):
            return None                          # the workload does not speculate
        if not b:                                # neither side drafted: nothing to compare
            return Check(wl, metric, unit, None, None, None, None, None, thr, "-", Verdict.INFO,
                         "not measured: no drafts on either side (requests too short to "
                         "draft?); reported, not judged")
        return Check(wl, metric, unit, b["mean_acceptance_length"], None, None, None, None,
                     thr, "AL = 1 + accepted / drafts (vLLM)", Verdict.ERROR,
                     f"not measured: the candidate speculated but verified no drafts, the "
                     f"baseline {int(b['num_drafts'])}")
    bal, cal = b.get("mean_acceptance_length"), c["mean_acceptance_length"]
    pooled = None if bal is None else cal / bal - 1
    pos = ", ".join(f"{c[k]:.2f}" for k in sorted(c) if k.startswith("acceptance_rate_pos_"))
    figures = f"acceptance rate {c['acceptance_rate']:.3f}; per position {pos}"

    def info(why: str) -> Check:
        return Check(wl, metric, unit, bal, cal, pooled, None, None, thr,
                     "AL = 1 + accepted / drafts (vLLM)", Verdict.INFO,
                     f"{why}; reported, not judged; {figures}")
    if bal is None:
        return info("the baseline made no drafts" if _speculated(base)
                    else "the baseline does not speculate")
    pb, pc = per_request_al(base), per_request_al(cand)
    if not pb or not pc:
        return info("no per-request draft counts on the "
                    + ("baseline" if not pb else "candidate")
                    + " (engine-wide counters only): no pairs to test")
    pairs = sorted(set(pb) & set(pc))
    n_min = stats.min_pairs_signed_rank(th.alpha)
    if len(pairs) < n_min:
        return info(f"{len(pairs)} requests drafted on both sides: a one-sided signed-rank "
                    f"test needs >= {n_min} to reach p < {th.alpha}")
    logr = np.log([pc[i] / pb[i] for i in pairs])
    level = 1 - 2 * th.alpha                      # two-sided interval, one-sided decision
    hl = stats.hodges_lehmann_ci_signed_rank(logr, level=level)
    wx = stats.wilcoxon_signed_rank(logr, alternative="less")
    rel, lo, hi = (math.expm1(x) for x in (hl.estimate, hl.lo, hl.hi))
    regressed = wx.p_value < th.alpha and rel < -th.acceptance_drop
    return Check(wl, metric, unit, bal, cal, rel, [lo, hi], wx.p_value, thr,
                 f"per-request AL ratio over {len(pairs)} paired requests: {hl.method} "
                 f"({level:.0%}); p: {wx.method} (one-sided, candidate lower)",
                 Verdict.REGRESSION if regressed else Verdict.PASS,
                 f"pooled AL {bal:.3f} -> {cal:.3f} ({pooled:+.1%}); requests with a lower "
                 f"/ higher candidate AL: {int((logr < 0).sum())} / {int((logr > 0).sum())} "
                 f"of {len(pairs)}; {figures}")


def chunk_coverage_check(wl: str, base: SideResult, cand: SideResult) -> Check | None:
    """Chunked-prefill coverage, where the workload asks for it (gsm8k `min_prefill_chunks`):
    how many prompts each side prefilled in >= 3 chunks and how many middle chunks it ran
    (chunks that neither start nor finish their prompt, and sample nothing: where vLLM PR
    36580's slot-mapping bug lived), counted from what each engine scheduled. It gates
    nothing itself (token agreement on the same prompts catches a corrupted KV cache); it
    says whether that agreement covered middle chunks. A side that ran none is "not
    measured", reported with the reason, never a pass."""
    want = (cand.resolved.get("chunked_prefill") or base.resolved.get("chunked_prefill")
            or {}).get("min_chunks")
    if not want:
        return None
    metric, unit = "chunked_prefill_coverage", "prompts"
    thr = f">= 1 prompt in >= {want} prefill chunks on each side"
    method = ("prefill chunks each engine's scheduler handed its runner, placed in their "
              "prompt by the tokens computed before the step; timed waves")
    got = {name: (s.counters.get(prefill_chunks.PROMPTS_3PLUS),
                  s.counters.get(prefill_chunks.MIDDLE))
           for name, s in (("baseline", base), ("candidate", cand))}
    b, c = got["baseline"][0], got["candidate"][0]

    def n(x: float | None) -> str:
        return "-" if x is None else f"{x:.0f}"
    counts = (f"prompts in >= {want} chunks {n(b)} / {n(c)}, middle chunks "
              f"{n(got['baseline'][1])} / {n(got['candidate'][1])} (baseline / candidate)")
    silent = [n for n, (p, _) in got.items() if p is None]
    if silent:
        return Check(wl, metric, unit, b, c, None, None, None, thr, method, Verdict.INFO,
                     f"not measured: the {' and '.join(silent)} reported no prefill-chunk "
                     "counts (a target that does not count them, or a run read back from "
                     "disk); reported, not judged")
    short = [n for n, (p, _) in got.items() if not p]
    if short:
        return Check(wl, metric, unit, b, c, None, None, None, thr, method, Verdict.INFO,
                     f"not measured: no prompt ran in >= {want} prefill chunks on the "
                     f"{' and '.join(short)} (max_num_batched_tokens too large for the "
                     f"prompts?), so token agreement here says nothing about middle chunks; "
                     f"{counts}")
    return Check(wl, metric, unit, b, c, c - b, None, None, thr, method, Verdict.PASS, counts)


def cross_engine(base: SideResult, cand: SideResult) -> bool:
    return base.resolved.get("target", "bundled") != cand.resolved.get("target", "bundled")


def _not_gated(c: Check, why: str) -> Check:
    if c.verdict in (Verdict.PASS, Verdict.REGRESSION):
        c.verdict, c.note = Verdict.INFO, f"{why}; {c.note}" if c.note else why
    return c


def machine_busy(base: SideResult, cand: SideResult) -> tuple[bool, str]:
    """(not measured, note) for a workload's latency checks, from the step threads' time
    off their CPUs (canary.off_cpu_share; CPU engines only, where a step never waits for a
    device). The baseline never carries a fault, so its thread off-CPU for MAX_OFF_CPU of
    its steps means the machine ran other work during the waves: the latency figures are
    the machine's, in either direction, and are not judged. A candidate off-CPU alone may be
    its own doing (a blocking wait it added), so it is judged, with a note."""
    if base.resolved.get("device") != "cpu" or cand.resolved.get("device") != "cpu":
        return False, ""
    sb, sc = off_cpu_share(base.steps), off_cpu_share(cand.steps)
    if sb is None or sc is None:
        return False, ""
    said = (f"the engine threads were off their CPUs for {sb:.1%} (baseline) and {sc:.1%} "
            f"(candidate) of their timed steps")
    if sb >= MAX_OFF_CPU:
        return True, f"not measured: {said}: the machine ran other work"
    if sc >= MAX_OFF_CPU:
        return False, f"{said}: possibly the candidate's own waiting, so judged"
    return False, ""


def compare(wl: str, base: SideResult, cand: SideResult, th: Thresholds,
            reference: dict | None = None) -> list[Check]:
    """Every check of one workload. Across engines (bundled vs vLLM) the two sides are not
    one code base at two versions, so latency, acceptance length and baseline-relative sync
    counts are reported, not gated; token parity replaces request agreement, and accuracy
    stays a paired test."""
    cross = cross_engine(base, cand)
    checks = [latency_check(wl, m, base, cand, th) for m in th.latency_metrics]
    busy, why = machine_busy(base, cand)
    for c in checks:
        if busy:
            _not_gated(c, why)
        elif why:
            c.note = f"{c.note}; {why}" if c.note else why
    if cross:
        checks = [_not_gated(c, "cross-engine latency: reported, not gated") for c in checks]
    agree = parity_check(wl, base, cand, th) if cross else agreement_check(wl, base, cand, th)
    samplers = base.resolved.get("sampler"), cand.resolved.get("sampler")
    if agree is not None and is_sampled(cand) and samplers[0] != samplers[1]:
        agree = _not_gated(agree, "the runners' samplers differ, so equal seeded streams are "
                                  "not promised (sampled_distribution judges)")
    checks += [accuracy_check(wl, base, cand, th), agree, sampled_check(wl, base, cand, th),
               chunk_coverage_check(wl, base, cand),
               sync_check(wl, base, cand, th, relative=not cross),
               sync_warnings_check(wl, base, cand, th),
               count_info(wl, "ops_per_step", "ops", base, cand),
               count_info(wl, "allocs_per_step", "allocs", base, cand),
               counts_vs_baseline(wl, base, cand, th) if same_runner(base, cand) else None,
               audit_check(wl, cand, th), reference_check(wl, cand, reference, th),
               dispatch_check(wl, base, cand)]
    spec = spec_check(wl, base, cand, th)
    if spec is not None and cross:
        spec = _not_gated(spec, "cross-engine acceptance: reported, not gated")
    checks.append(spec)
    return [c for c in checks if c is not None]
