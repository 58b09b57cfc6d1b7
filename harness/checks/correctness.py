"""Correctness: whether the candidate computes what the baseline computes.

Greedy decoding should give both sides the same tokens (token_agreement: the share of
requests whose tokens are identical), and accuracy must not fall (accuracy_strict, paired
by request). Runners with different samplers promise no equal streams, so a sampled
workload's per-prompt distributions are compared instead (sampled_distribution). Across
engines the kernels differ and a near-tie may flip once, so the share of equal tokens is
judged (cross_engine_parity), not whole requests.
"""
from __future__ import annotations

import math

import numpy as np

from mrbench.contract import SideResult

from ..measure.agreement import first_divergence
from ..record.run_record import Bar, BarKind, Check, DeltaKind, Verdict
from ..record.suite import Thresholds
from . import stats


def accuracy_check(wl: str, base: SideResult, cand: SideResult, th: Thresholds) -> Check | None:
    b = [r.get("correct_strict") for r in base.requests]
    c = [r.get("correct_strict") for r in cand.requests]
    if not b or any(x is None for x in b + c) or len(b) != len(c):
        return None
    random = [s for s, side in (("baseline", base), ("candidate", cand))
              if side.resolved.get("random_weights")]
    if random:
        return Check(wl, "accuracy_strict", "fraction", float(np.mean(b)), float(np.mean(c)),
                     None, None, None, f"-{th.accuracy_drop} and p < {th.alpha}", "-",
                     Verdict.INFO, "not measured: random weights (the model's mrbench_model.json "
                     f"says so, on the {' and the '.join(random)}): what it answers "
                     "measures nothing", delta_kind=DeltaKind.DIFFERENCE,
                     bar=Bar(kind=BarKind.MAX_DECREASE, value=th.accuracy_drop, alpha=th.alpha))
    mc = stats.mcnemar_exact(b, c)
    ci = stats.paired_diff_proportion_ci(b, c, level=1 - th.alpha)
    delta = float(np.mean(c) - np.mean(b))
    regressed = mc.p_value < th.alpha and delta < -th.accuracy_drop
    return Check(wl, "accuracy_strict", "fraction", float(np.mean(b)), float(np.mean(c)), delta,
                 [ci.lo, ci.hi], mc.p_value, f"-{th.accuracy_drop} and p < {th.alpha}",
                 f"{mc.method}; CI {ci.method}", Verdict.REGRESSION if regressed else Verdict.PASS,
                 f"n = {len(b)}; discordant: base-only {int((np.array(b) & ~np.array(c)).sum())}"
                 f", cand-only {int((~np.array(b) & np.array(c)).sum())}",
                 delta_kind=DeltaKind.DIFFERENCE,
                 bar=Bar(kind=BarKind.MAX_DECREASE, value=th.accuracy_drop, alpha=th.alpha))


def comparable_tokens(base: SideResult, cand: SideResult
                      ) -> tuple[list[tuple[int, list[int], list[int]]], int]:
    """(request index, baseline tokens, candidate tokens) of the requests promised equal
    tokens, and how many were left out: an unseeded sampled request (`sampling_seed` None)
    is promised no stream, so no token-for-token check compares it."""
    unseeded = {i for i, r in enumerate(base.requests)
                if r.get("sample_group") is not None and "sampling_seed" in r
                and r["sampling_seed"] is None}
    rows = [(i, b, c) for i, (b, c) in enumerate(zip(base.tokens, cand.tokens))
            if i not in unseeded]
    return rows, len(unseeded & set(range(min(len(base.tokens), len(cand.tokens)))))


def degenerate_streams(side: SideResult) -> tuple[int, int]:
    """(prompts whose seeded samples gave one stream, prompts with >= 2 seeded samples) on
    one side: a setting cold enough to give most prompts a single stream from several seeds
    is greedy in effect, and a sampler's noise does not show in its streams."""
    groups: dict[int, set[tuple[int, ...]]] = {}
    counts: dict[int, int] = {}
    for i, r in enumerate(side.requests):
        if r.get("sample_group") is None or r.get("sampling_seed") is None \
                or i >= len(side.tokens):
            continue
        g = int(r["sample_group"])
        groups.setdefault(g, set()).add(tuple(side.tokens[i]))
        counts[g] = counts.get(g, 0) + 1
    many = [g for g, n in counts.items() if n >= 2]
    return sum(len(groups[g]) == 1 for g in many), len(many)


def exact_streams_check(wl: str, base: SideResult, cand: SideResult,
                        th: Thresholds) -> Check | None:
    """Seeded streams token for token where both sides run one runner and one sampler (two
    builds of it, or an A/A run): the same seed promises the same stream, so one stream that
    differs anywhere is a regression; the bar is 0 divergent streams, not a confidence
    interval (a sampler whose noise changed moves some streams, not most: 1 of 64 passed a
    Wilson bound at 0.99). Not measured, never a pass, where the baseline's streams are
    degenerate: most prompts giving one stream from several seeds is greedy in effect."""
    rows, unseeded = comparable_tokens(base, cand)
    skipped = f"; {unseeded} unseeded requests not compared" if unseeded else ""
    div = [first_divergence(b, c) for _, b, c in rows]
    n, agree = len(div), sum(d == -1 for d in div)
    kind = dict(delta_kind=DeltaKind.DIFFERENCE, bar=Bar(kind=BarKind.MIN_VALUE, value=1.0))
    thr, method = "0 divergent seeded streams", ("seeded streams compared token for token: one "
                                                  "runner and one sampler on both sides")
    if n == 0:
        why = (f"all {unseeded} requests are unseeded, so no stream is promised equal"
               if unseeded else "no seeded stream on either side")
        return Check(wl, "token_agreement", "fraction", None, None, None, None, None, thr,
                     method, Verdict.INFO, f"not measured: {why}", **kind)
    rate = agree / n
    one, prompts = degenerate_streams(base)
    if agree < n:
        first = min((d, i) for (i, _, _), d in zip(rows, div) if d >= 0)
        note = (f"{n - agree} of {n} seeded streams diverge; earliest at output token "
                f"{first[0]} (request {first[1]})")
        verdict = Verdict.REGRESSION
    elif base.resolved.get("sampling_temperature") == 0:
        note = f"{n} seeded streams equal (greedy: one stream a prompt by design)"
        verdict = Verdict.PASS
    elif prompts == 0 or 2 * one > prompts:
        note = (f"not measured: {one} of {prompts} prompts gave a single stream from their "
                "seeds on the baseline (a setting this cold is greedy in effect: a changed "
                f"sampler noise would not show); all {n} streams equal")
        verdict = Verdict.INFO
    else:
        note = (f"{n} seeded streams equal; {prompts - one} of {prompts} prompts gave more "
                "than one stream on the baseline")
        verdict = Verdict.PASS
    return Check(wl, "token_agreement", "fraction", 1.0, rate, rate - 1.0, None, None, thr,
                 method, verdict, note + skipped, **kind)


def agreement_check(wl: str, base: SideResult, cand: SideResult,
                    th: Thresholds) -> Check | None:
    rows, unseeded = comparable_tokens(base, cand)
    skipped = f"; {unseeded} unseeded requests not compared" if unseeded else ""
    div = [first_divergence(b, c) for _, b, c in rows]
    n, agree = len(div), sum(d == -1 for d in div)
    if n == 0 and unseeded:
        return Check(wl, "token_agreement", "fraction", None, None, None, None, None,
                     f"CI upper < {th.agreement_min}", "-", Verdict.INFO,
                     f"not measured: all {unseeded} requests are unseeded, so no stream is "
                     "promised equal", delta_kind=DeltaKind.DIFFERENCE,
                     bar=Bar(kind=BarKind.MIN_VALUE, value=th.agreement_min, alpha=th.alpha))
    if n == 0:                    # no tokens on a side (an imported vllm bench run): no check
        return None
    ci = stats.proportion_ci_wilson(agree, n, level=1 - 2 * th.alpha) if n else None
    rate = agree / n if n else math.nan
    regressed = ci is not None and ci.hi < th.agreement_min
    note = ("tokens" if is_sampled(cand) else "greedy tokens") + " equal for every request"
    if agree < n:
        first = min((d, i) for (i, _, _), d in zip(rows, div) if d >= 0)
        note = (f"{n - agree} of {n} requests diverge; earliest at output token {first[0]} "
                f"(request {first[1]}); median first divergence "
                f"{int(np.median([d for d in div if d >= 0]))}")
    note += skipped
    # a regression when the share is below agreement_min significantly: its CI's upper end
    return Check(wl, "token_agreement", "fraction", 1.0, rate, rate - 1.0 if n else None,
                 [ci.lo, ci.hi] if ci else None, None, f"CI upper < {th.agreement_min}",
                 "share of requests with identical greedy tokens; Wilson CI",
                 Verdict.REGRESSION if regressed else Verdict.PASS, note,
                 delta_kind=DeltaKind.DIFFERENCE,
                 bar=Bar(kind=BarKind.MIN_VALUE, value=th.agreement_min, alpha=th.alpha))


SAMPLED_STATS = ("distinct_streams", "output_tokens", "accuracy_strict")


def is_sampled(side: SideResult) -> bool:
    """The workload sampled several streams per prompt (rows carry `sample_group`; a side
    read back from a run's tables has the column on every workload's rows, None where the
    workload did not sample)."""
    return any(r.get("sample_group") is not None for r in side.requests)


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
    kind = dict(delta_kind=DeltaKind.DIFFERENCE,
                bar=Bar(kind=BarKind.SIGNIFICANCE, alpha=th.alpha))
    need = min_sampled_prompts(th.alpha, k)
    if len(common) < need:
        return Check(wl, "sampled_distribution", "per prompt", None, None, None, None, None,
                     thr, "-", Verdict.INFO, f"not measured: {len(common)} prompts with >= 2 "
                     f"samples on both sides; the sign-flip test needs >= {need} to reach "
                     f"alpha / {k}", **kind)
    if not any(b[g]["streams"] > 1 for g in common):
        return Check(wl, "sampled_distribution", "per prompt", None, None, None, None, None,
                     thr, "-", Verdict.INFO, f"not measured: every one of the {len(common)} "
                     "prompts gave a single stream on the baseline (a setting this cold is "
                     "greedy in effect: shared or broken noise would not show)", **kind)
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
                 Verdict.REGRESSION if p_adj < th.alpha else Verdict.PASS, note, **kind)


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
    rows, unseeded = comparable_tokens(base, cand)
    eq, total = token_parity([b for _, b, _ in rows], [c for _, _, c in rows])
    rate = eq / total if total else math.nan
    div = [first_divergence(b, c) for _, b, c in rows]
    same = sum(d == -1 for d in div)
    note = f"{same} of {len(div)} requests identical" + (
        f"; {unseeded} unseeded requests not compared" if unseeded else "")
    if same < len(div):
        first = min((d, i) for (i, _, _), d in zip(rows, div) if d >= 0)
        note += f"; earliest divergence at output token {first[0]} (request {first[1]})"
    return Check(wl, "cross_engine_parity", "fraction", 1.0, rate,
                 None if not total else rate - 1.0, None, None, f">= {th.parity_min}",
                 f"share of equal greedy tokens, {base.resolved.get('target')} vs "
                 f"{cand.resolved.get('target')}, same weights ({eq}/{total})",
                 Verdict.REGRESSION if total and rate < th.parity_min else Verdict.PASS, note,
                 delta_kind=DeltaKind.DIFFERENCE,
                 bar=Bar(kind=BarKind.MIN_VALUE, value=th.parity_min))
