"""Spec decode: the acceptance figures vLLM reports, and the acceptance-length gate.

A sampler that rejects drafts it should accept changes no token, only how many steps the
tokens take, so the mean acceptance length is the one place it shows. It is judged paired
over requests (the same prompt on both sides), where the sides count drafts per request.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from mrbench.contract import SideResult

from ..record.metrics import SPEC_POSITIONS
from ..record.run_record import Bar, BarKind, Check, DeltaKind, Verdict
from ..record.suite import Thresholds
from . import stats


def spec_summary(side: SideResult) -> dict[str, Any]:
    """The side's spec-decode figures under `vllm bench serve`'s names and units (its
    result's spec_decode_* group: record/metrics.py), over the timed waves: counts of
    drafts, draft tokens and accepted tokens, the acceptance rate in percent, the
    acceptance length (AL = 1 + accepted / drafts) and the per-position acceptance rates
    (accepted at position j / drafts, fractions as vLLM gives them; empty without
    per-position counts, as vLLM's list is). From per-request counts (bundled) or the
    engine's counters (vLLM's `vllm:spec_decode_num_drafts`, `..._num_draft_tokens`,
    `..._num_accepted_tokens`, `..._num_accepted_tokens_per_pos`). Empty without drafts:
    vLLM reports the group only where drafts were made."""
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
    positions = []
    while any(f"accepted_pos_{len(positions)}" in r for r in rows):
        j = len(positions)
        positions.append(sum(r.get(f"accepted_pos_{j}") or 0 for r in rows) / drafts)
    return {"spec_decode_acceptance_rate": 100 * acc / dt if dt else math.nan,
            "spec_decode_acceptance_length": 1 + acc / drafts,
            "spec_decode_num_drafts": int(drafts), "spec_decode_draft_tokens": int(dt),
            "spec_decode_accepted_tokens": int(acc), SPEC_POSITIONS: positions}


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
    kind = dict(delta_kind=DeltaKind.RELATIVE, bar=Bar(kind=BarKind.MAX_RELATIVE_DECREASE,
                                                        value=th.acceptance_drop,
                                                        alpha=th.alpha))
    b, c = spec_summary(base), spec_summary(cand)
    if not c:
        if not _speculated(cand):
            return None                          # the workload does not speculate
        if not b:                                # neither side drafted: nothing to compare
            return Check(wl, metric, unit, None, None, None, None, None, thr, "-", Verdict.INFO,
                         "not measured: no drafts on either side (requests too short to "
                         "draft?); reported, not judged", **kind)
        return Check(wl, metric, unit, b["spec_decode_acceptance_length"], None, None, None,
                     None, thr, "AL = 1 + accepted / drafts (vLLM)", Verdict.ERROR,
                     f"not measured: the candidate speculated but verified no drafts, the "
                     f"baseline {b['spec_decode_num_drafts']}", **kind)
    bal, cal = b.get("spec_decode_acceptance_length"), c["spec_decode_acceptance_length"]
    pooled = None if bal is None else cal / bal - 1
    pos = ", ".join(f"{x:.2f}" for x in c[SPEC_POSITIONS])
    figures = f"acceptance rate {c['spec_decode_acceptance_rate']:.1f} %; per position {pos}"

    def info(why: str) -> Check:
        return Check(wl, metric, unit, bal, cal, pooled, None, None, thr,
                     "AL = 1 + accepted / drafts (vLLM)", Verdict.INFO,
                     f"{why}; reported, not judged; {figures}", **kind)
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
                 f"of {len(pairs)}; {figures}", **kind)
