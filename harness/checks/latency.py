"""Latency: whether the candidate's P99 (or median) step, TTFT or ITL grew, and the summary
figures a run reports beside them.

A tail is noisy and the machine drifts, so a latency regression must be significant AND
beyond the suite's threshold, and it is judged per interleaved (ABBA) wave where there are
enough waves: a wave's ratio is free of the drift. A wave the canary saw the machine itself
disturb is left out, and a tail of too few independent samples is reported, not judged.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import norm

from mrbench.contract import SideResult

from ..measure.canary import wave_disturbed
from ..record.metrics import LATENCY, PERCENTILES, REQUEST_PHASES, SUMMARY_FIELDS
from ..record.run_record import NOT_GATED, Bar, BarKind, Check, DeltaKind, Verdict
from ..record.suite import Thresholds
from . import stats, stats_across_runs, stats_bootstrap
from .spec import spec_summary


def _samples(side: SideResult, table: str, column: str) -> np.ndarray:
    rows = getattr(side, table)
    x = np.array([r.get(column) for r in rows if r.get(column) is not None], dtype=float)
    return x[~np.isnan(x)]


def _effective_n(side: SideResult, table: str, samples: np.ndarray) -> int:
    """Independent samples behind a latency column. The requests of one batch step all get
    their token at the same moment, so their ITLs are one sample, not batch-size many: ITL
    counts at most one sample per timed step. An imported vllm bench run has no step table;
    its importer records a lower bound on the steps instead (harness/commands/vllm_bench.py)."""
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


def _total(rows: list[dict], column: str) -> int | float:
    """The sum of a token count `column` over `rows`; NaN where no row has it (an import
    without per-request token counts): unknown, not zero."""
    vals = [r[column] for r in rows if r.get(column) is not None]
    return int(sum(vals)) if vals else math.nan


def latency_summary(side: SideResult, percentiles: Sequence[float] = PERCENTILES
                    ) -> dict[str, Any]:
    """The side's figures, under `vllm bench serve`'s field names wherever vLLM reports the
    same figure (record/metrics.py says why), then mrbench's own.

    vLLM's, as its benchmark() computes them: duration (s: the side's timed span, the wall
    time of its waves), completed and failed requests (failed: a row with an `error`, as an
    import has; NaN without request rows), total_input_tokens and total_output_tokens (of
    the completed requests), request_throughput, output_throughput and
    total_token_throughput (per second of duration), mean_/median_/std_/pNN_ X _ms for X
    in ttft, tpot, itl and e2el, pNN over `percentiles` (the run's choice, as vLLM's
    --metric-percentiles: metrics.PERCENTILES unless the suite or --percentiles says),
    and where the side speculated the spec_decode_* figures (spec_summary). NaN (null in
    summary.json) where the side has no such data.

    mrbench's own: the same statistics of the engine step (X = step) and of the queueing,
    KV hand-off and prefill times where the engine reported them, distribution-free CIs of
    the step percentiles, the slow-step ruler's share and the engine's counters."""
    ok = [r for r in side.requests if not r.get("error")]
    done, failed = (len(ok), len(side.requests) - len(ok)) if side.requests else (math.nan,) * 2
    duration = side.wall_s or math.nan
    n_in, n_out = _total(ok, "prompt_tokens"), _total(ok, "output_tokens")
    out: dict[str, Any] = dict(
        duration=duration, completed=done, failed=failed,
        total_input_tokens=n_in, total_output_tokens=n_out,
        request_throughput=done / duration, output_throughput=n_out / duration,
        total_token_throughput=(n_in + n_out) / duration)
    for name, (table, col) in SUMMARY_FIELDS.items():
        out.update(_statistics(name, _samples(side, table, col), percentiles))
    steps = _samples(side, "steps", "duration_ms")
    for q in (50, 90, 99):                      # distribution-free CIs of the step percentiles
        ci = stats.percentile_ci_order_statistic(steps, q, level=0.95)
        out[f"p{q}_step_ms_ci95"] = [ci.lo, ci.hi]
    for name, (table, col) in REQUEST_PHASES.items():
        x = _samples(side, table, col)
        if len(x):
            out.update(_statistics(name, x, percentiles))
    ruler = ruler_added_pct(side)
    if ruler is not None:
        out["ruler_added_pct"] = ruler
    out.update(side.counters)
    out.update(spec_summary(side))
    return out


def _statistics(name: str, samples: np.ndarray, percentiles: Sequence[float]
                ) -> dict[str, float]:
    """mean_/median_/std_/pNN_ `name` _ms of `samples` (vLLM's process_one_metric)."""
    s = stats.summarize_latency(samples, percentiles)
    return {f"{stat}_{name}_ms": v for stat, v in s.items() if stat not in ("max", "n")}


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
    the guard's own level adds to the gate's false alarms, while a storm the candidate
    causes is lopsided far beyond it (the A/A run that set the level:
    docs/detection-power.md, "Bursts")."""
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


def _pair_of(cand: SideResult, table: str, waves: list[int]) -> dict[int, int]:
    """Wave -> the engine pair that ran it (rows without `engine_pair`: one pair, 0)."""
    out: dict[int, int] = {}
    for r in getattr(cand, table):
        w, k = r.get("wave"), r.get("engine_pair")
        if w is not None and int(w) not in out:
            out[int(w)] = 0 if k is None or (isinstance(k, float) and math.isnan(k)) else int(k)
    return {w: out.get(w, 0) for w in waves}


def _across_pairs(waves: list[int], logr: np.ndarray, pair_of: dict[int, int],
                  th: Thresholds, level: float
                  ) -> tuple[stats_across_runs.PooledEstimate | None, list[list[float]], str]:
    """Each engine pair's log ratio (the Hodges-Lehmann estimate over its waves, its
    standard error from that CI's width) pooled over the pairs with a between-pair sd of
    at least the suite's `pair_sd_rel` (stats_across_runs.random_effects_mean_hksj): a pair's
    own offset is in the CI however many waves it ran. (None, why) where no pair has
    MIN_WAVES waves (None, [], why); else (pooled, each pair's [log ratio, standard error],
    a note with each pair's figure)."""
    z = float(norm.ppf(0.5 + level / 2))
    est, se, said, short = [], [], [], 0
    for k in sorted(set(pair_of.values())):
        x = logr[[i for i, w in enumerate(waves) if pair_of[w] == k]]
        if len(x) < MIN_WAVES:
            short += 1
            continue
        hl = stats.hodges_lehmann_ci_signed_rank(x, level=level)
        est.append(hl.estimate)
        se.append(max((hl.hi - hl.lo) / (2 * z), 1e-9))
        said.append(f"{math.expm1(hl.estimate):+.1%} ({len(x)} waves)")
    left_out = f"; {short} pair(s) of under {MIN_WAVES} waves left out" if short else ""
    if not est:
        return None, [], f"no engine pair has {MIN_WAVES} waves{left_out}"
    tau_floor = math.log1p(th.pair_sd_rel or 0.0)
    pooled = stats_across_runs.random_effects_mean_hksj(est, se, tau_floor, level)
    return pooled, [[e, s] for e, s in zip(est, se)], (f"engine pairs {', '.join(said)}; between pairs sd "
                    f"{math.expm1(pooled.tau):.1%} ({pooled.tau_source}){left_out}")


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
    bar = NOT_GATED if rel_min is None else Bar(kind=BarKind.MAX_RELATIVE_INCREASE,
                                                value=rel_min, alpha=th.alpha)

    def check(*fields, **named) -> Check:       # every delta here: candidate/baseline - 1
        return Check(wl, metric, "ms", *fields, delta_kind=DeltaKind.RELATIVE, bar=bar,
                     **named)
    if len(b) < 2 or len(c) < 2:
        rb = stats.percentile(b, q) if len(b) >= 2 else _reported(base, metric)
        rc = stats.percentile(c, q) if len(c) >= 2 else _reported(cand, metric)
        if rb is not None and rc is not None:     # a side has only its source's figure
            return check(rb, rc, rc / rb - 1 if rb else None, None, None,
                         thr, f"reported {name}s (a side has no per-request samples)", Verdict.INFO,
                         "aggregates only (vllm bench serve without --save-detailed): "
                         "no samples, no statistical test; reported, not judged")
        return check(None, None, None, None, None, thr, "-", Verdict.INFO,
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
        return check(bp, cp, cp / bp - 1 if bp else None, None, None, thr,
                     "-", Verdict.INFO, f"not measured: under {MIN_WAVES} waves left{canary_note}")
    if len(waves) >= MIN_WAVES:
        logr = np.log([stats.percentile(cw[w], q) / stats.percentile(bw[w], q)
                       for w in waves])
        pair_of = _pair_of(cand, table, waves)
        if th.pair_sd_rel is not None or len(set(pair_of.values())) > 1:
            pooled, pooled_pairs, note = _across_pairs(waves, logr, pair_of, th, level)
            if pooled is not None:
                rel, lo, hi = (math.expm1(x) for x in (pooled.estimate, pooled.lo, pooled.hi))
                note = (f"pooled {name} {bp:.3g} -> {cp:.3g} ms; {note}"
                        f"{_order_note(cand, table, waves, logr, level)}{canary_note}")
                verdict = (Verdict.INFO if rel_min is None else
                           Verdict.REGRESSION if pooled.p_greater < th.alpha and rel > rel_min
                           else Verdict.PASS)
                return check(bp, cp, rel, [lo, hi], pooled.p_greater, thr,
                             f"per-wave {name} ratio, per engine pair a Hodges-Lehmann "
                             f"estimate over its ABBA waves, then {pooled.method}", verdict,
                             note if rel_min is not None
                             else f"reported, not gated: the suite sets no median_rel; {note}",
                             pairs=pooled_pairs)
            return check(bp, cp, cp / bp - 1 if bp else None, None, None, thr, "-",
                         Verdict.INFO, f"not measured: {note}{canary_note}")
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
        return check(bp, cp, rel, [lo, hi], wx.p_value, thr,
                     f"per-wave {name} ratio over {len(waves)} ABBA waves: {hl.method} "
                     f"({level:.0%}); p: {wx.method}", verdict, note)
    if q == 50:
        return check(bp, cp, cp / bp - 1 if bp else None, None, None, thr,
                     "-", Verdict.INFO, f"{len(waves)} usable waves (>= {MIN_PER_WAVE[q]} samples "
                     f"each): a median is judged per ABBA wave only, >= {MIN_WAVES} waves; "
                     f"reported, not judged{canary_note}")
    n_min = stats.min_samples_percentile_ci(q, level)
    n_eff = min(_effective_n(base, table, b), _effective_n(cand, table, c))
    if n_eff < n_min:
        return check(bp, cp, None, None, None, thr, "-", Verdict.INFO,
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
            return check(bp, cp, cp / bp - 1 if bp else None, None, None,
                         thr, "-", Verdict.INFO,
                         f"not measured: under {MIN_WAVES} waves left{canary_note}")
        rel = stats_bootstrap.ratio_percentile_ci_wave_bootstrap([bw[w] for w in shared],
                                                       [cw[w] for w in shared], q, level=level)
        regressed = rel.lo > 0 and rel.estimate > rel_min
        return check(bp, cp, rel.estimate, [rel.lo, rel.hi], None, thr,
                     f"pooled relative {name} change over {len(shared)} ABBA waves, "
                     f"{rel.method} ({level:.0%}); decided by the CI's lower bound",
                     Verdict.REGRESSION if regressed else Verdict.PASS,
                     f"n = {len(b)} / {len(c)}; under {MIN_PER_WAVE[q]} samples a wave, so "
                     f"waves are resampled whole rather than compared one by one{canary_note}")
    rel = stats_bootstrap.ratio_percentile_ci_bootstrap(b, c, q, level=level)
    mw = stats.mann_whitney_u(b, c, alternative="greater")
    regressed = rel.lo > 0 and rel.estimate > rel_min
    return check(bp, cp, rel.estimate, [rel.lo, rel.hi], mw.p_value, thr,
                 f"pooled relative {name} change, {rel.method} ({level:.0%}); p: {mw.method}",
                 Verdict.REGRESSION if regressed else Verdict.PASS,
                 f"n = {len(b)} / {len(c)}; fewer than {MIN_WAVES} waves, so not blocked")
