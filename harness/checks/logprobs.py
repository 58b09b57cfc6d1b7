"""Logprobs: whether the candidate returns the logprobs the baseline returns.

Tokens can agree while their logprobs do not: a runner that takes processed logprobs
before the top-k mask samples the same tokens and reports a distribution it never sampled
from (the `processed-logprobs-unmasked` fault), and no token check sees it. So per output
position that both sides reached with the same tokens before it, the generated token's
logprob and the position's top-N token set are compared (`logprobs_agreement`).

Both are deterministic for a fixed input, so the bar is a tolerance, not a test: the
logprobs of two runners of one model differ only by rounding (their batches differ, so
their sums run in other orders), which grows with the logits' dtype. The tolerance is the
looser side's dtype's (`LOGPROB_TOLERANCE`). The top-N sets may differ only where the N-th
and (N + 1)-th logprobs of a side lie within it (a near tie, which rounding may order either
way): the workload asks the engine for N + 1 so that this is seen.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

from mrbench.contract import SideResult

from ..record.run_record import Bar, BarKind, Check, DeltaKind, Verdict

METRIC = "logprobs_agreement"
# |logprob difference| two runners of one model may show, by the dtype of the logits. Both
# targets take the log-softmax in float32, so no dtype is tighter than float32's rounding.
# float32: rounding of logits summed in another order is ~1e-6 of their size (logits of
#   the models here are up to ~20); 1e-4 leaves two orders of magnitude.
# float16: 11 significant bits, a logit of 20 rounds by up to 20 x 2^-11 ~ 0.01 per side.
# bfloat16: 8 significant bits, 20 x 2^-8 ~ 0.08 per side.
LOGPROB_TOLERANCE: dict[str, float] = {"float64": 1e-4, "float32": 1e-4,
                                       "float16": 2e-2, "bfloat16": 1e-1}
LOOSEST = max(LOGPROB_TOLERANCE.values())


def tolerance(base: SideResult, cand: SideResult) -> tuple[float, str]:
    """(tolerance, the dtype it is for): the looser of the two sides' dtypes; a dtype not
    in LOGPROB_TOLERANCE takes the loosest, and says so."""
    got = []
    for side in (base, cand):
        dt = str(side.resolved.get("dtype") or "unknown")
        got.append((LOGPROB_TOLERANCE.get(dt, LOOSEST), dt if dt in LOGPROB_TOLERANCE
                    else f"{dt} (unknown: the loosest)"))
    return max(got)


@dataclass
class _Tally:
    positions: int = 0           # positions compared (the same tokens before them)
    token_positions: int = 0     # of those, where the generated token is the same too
    logprob_mismatches: int = 0
    set_mismatches: int = 0
    near_ties: int = 0           # top-N sets that differ within a near tie (allowed)
    mismatched: int = 0          # positions with either mismatch
    max_delta: float = 0.0
    first: tuple[int, int] | None = None      # (request, output position) of the first


def _entries(row: dict) -> list | None:
    raw = row.get("logprobs")
    if raw is None or (isinstance(raw, float) and math.isnan(raw)):
        return None
    return json.loads(raw) if isinstance(raw, str) else raw


def _delta(a: float, b: float) -> float:
    if a == b:                   # equal, -inf included
        return 0.0
    return abs(a - b)


def _top_set(top: list, n: int) -> set[int]:
    """The top-n token ids with a finite logprob (masked tokens tie at -inf, in no order)."""
    return {int(t) for t, lp in top[:n] if math.isfinite(lp)}


def _near_tie(top: list, n: int, tol: float) -> bool:
    """The n-th and (n + 1)-th logprobs within `tol`: rounding may order them either way."""
    return len(top) > n and _delta(top[n - 1][1], top[n][1]) <= tol


def _compare(tally: _Tally, req: int, b: list, c: list, bt: list[int], ct: list[int], n: int,
             tol: float) -> None:
    for j, (eb, ec) in enumerate(zip(b, c)):
        if bt[:j] != ct[:j]:
            return                # the contexts differ from here on: nothing to compare
        tally.positions += 1
        bad = False
        if j < len(bt) and j < len(ct) and bt[j] == ct[j]:
            tally.token_positions += 1
            d = _delta(eb[0], ec[0])
            tally.max_delta = max(tally.max_delta, d)
            if d > tol:
                tally.logprob_mismatches += 1
                bad = True
        if _top_set(eb[1], n) != _top_set(ec[1], n):
            if _near_tie(eb[1], n, tol) or _near_tie(ec[1], n, tol):
                tally.near_ties += 1
            else:
                tally.set_mismatches += 1
                bad = True
        if bad:
            tally.mismatched += 1
            tally.first = tally.first or (req, j)


def logprobs_check(wl: str, base: SideResult, cand: SideResult) -> Check | None:
    """Candidate against baseline, per compared position: |delta logprob of the generated
    token| <= the dtype's tolerance, and the top-N token set equal but for near ties. None
    where the workload asked no side for logprobs (its rows carry no `logprobs_top_n`)."""
    if not any("logprobs_top_n" in r for side in (base, cand) for r in side.requests):
        return None
    tol, dtype = tolerance(base, cand)
    thr = f"0 positions beyond |delta| {tol:g} (dtype {dtype})"
    kind = dict(delta_kind=DeltaKind.NONE, bar=Bar(kind=BarKind.MAX_VALUE, value=0.0))
    method = ("per output position whose preceding tokens agree on both sides: the "
              "generated token's logprob (where that token agrees too) within the tolerance, "
              "and the top-N token set equal unless a side's N-th and (N+1)-th logprobs are "
              "within it (a near tie)")

    def not_measured(why: str) -> Check:
        return Check(wl, METRIC, "positions", None, None, None, None, None, thr, method,
                     Verdict.INFO, f"not measured: {why}", **kind)
    asked = [r for r in cand.requests if r.get("logprobs_top_n") is not None]
    if not asked:
        return not_measured("no request asked for logprobs")
    silent = [name for name, side in (("baseline", base), ("candidate", cand))
              if all(_entries(r) is None for r in side.requests)]
    if silent:
        return not_measured(f"the {' and '.join(silent)} returned no logprobs")
    tally = _Tally()
    for k, (rb, rc) in enumerate(zip(base.requests, cand.requests)):
        n = rc.get("logprobs_top_n")
        b, c = _entries(rb), _entries(rc)
        if n is None or b is None or c is None or k >= len(base.tokens) \
                or k >= len(cand.tokens):
            continue
        _compare(tally, int(rc.get("req_index", k)), b, c, base.tokens[k], cand.tokens[k],
                 int(n), tol)
    if not tally.positions:
        return not_measured("no output position had the same tokens before it on both "
                            "sides (or none had logprobs)")
    note = (f"{tally.positions} positions compared ({tally.token_positions} with the same "
            f"generated token); mismatches: {tally.logprob_mismatches} logprob, "
            f"{tally.set_mismatches} top-N set; near ties allowed {tally.near_ties}; "
            f"max |delta logprob| {tally.max_delta:.3g}")
    if tally.first is not None:
        note += f"; first at request {tally.first[0]}, output token {tally.first[1]}"
    return Check(wl, METRIC, "positions", None, float(tally.mismatched), None, None, None,
                 thr, method, Verdict.REGRESSION if tally.mismatched else Verdict.PASS, note,
                 **kind)
