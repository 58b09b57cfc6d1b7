"""KV-cache coverage: whether a run preempted requests, and hit its prefix cache, at all.

The preemption and prefix-cache workloads exist to hand the runner requests whose prefill
is not a fresh prompt's: a request resumed after preemption (it recomputes its prompt and
its outputs, in a slot another request held) and a request admitted with a cached prefix
(its first tokens are computed). Token agreement and the state audit judge those runs; these
checks say whether those requests happened on each side. A side that had none is "not
measured", with the reason, never a pass: agreement there says nothing about them. Both
figures come from each engine's own counters (the bundled scheduler's; vLLM's
`vllm:num_preemptions`, `vllm:prefix_cache_queries`, `vllm:prefix_cache_hits`), over the
timed waves. Neither gates a difference between the sides: the two runners of one engine
share its scheduler, and across engines the schedulers differ.
"""
from __future__ import annotations

from mrbench.contract import SideResult

from ..record.run_record import Bar, BarKind, Check, DeltaKind, Verdict

PREEMPTIONS = "num_preemptions"
PREFIX_HITS, PREFIX_QUERIES = "prefix_cache_hits", "prefix_cache_queries"
PREFIX_HIT_RATE = "prefix_cache_hit_rate"    # hits / queries: the workload records it
SIDES = ("baseline", "candidate")


def _marked(base: SideResult, cand: SideResult, key: str) -> dict | None:
    """What the workload recorded about its KV cache under `key` (None: not this workload)."""
    return cand.resolved.get(key) or base.resolved.get(key)


def _silent(got: dict[str, float | None], what: str) -> str | None:
    silent = [n for n in SIDES if got[n] is None]
    if not silent:
        return None
    return (f"not measured: the {' and '.join(silent)} reported no {what} (a target that "
            "does not count them, or a run read back from disk); reported, not judged")


def preemption_check(wl: str, base: SideResult, cand: SideResult) -> Check | None:
    """Preemptions each side's scheduler made over the timed waves, where the workload runs
    the KV cache short on purpose (the `preemption` workload)."""
    kv = _marked(base, cand, "preemption")
    if not kv:
        return None
    metric, unit = "preemption_coverage", "preemptions"
    thr = ">= 1 preemption on each side"
    kind = dict(delta_kind=DeltaKind.DIFFERENCE, bar=Bar(kind=BarKind.MIN_VALUE, value=1.0))
    method = ("requests each engine's scheduler preempted (recompute) over the timed waves: "
              "its own counter (bundled scheduler; vLLM's vllm:num_preemptions)")
    got = {n: s.counters.get(PREEMPTIONS) for n, s in zip(SIDES, (base, cand))}
    b, c = got["baseline"], got["candidate"]
    cache = f"KV cache of {kv['num_kv_blocks']} blocks of {kv['block_size']} tokens"
    why = _silent(got, "preemption count")
    if why:
        return Check(wl, metric, unit, b, c, None, None, None, thr, method, Verdict.INFO,
                     why, **kind)
    counts = f"{b:.0f} / {c:.0f} preemptions (baseline / candidate), {cache}"
    short = [n for n in SIDES if not got[n]]
    if short:
        return Check(wl, metric, unit, b, c, None, None, None, thr, method, Verdict.INFO,
                     f"not measured: no request was preempted on the {' and '.join(short)} "
                     f"({cache}: not short enough for these requests?), so token agreement "
                     f"here says nothing about resumed requests; {counts}", **kind)
    return Check(wl, metric, unit, b, c, c - b, None, None, thr, method, Verdict.PASS, counts,
                 **kind)


def prefix_cache_check(wl: str, base: SideResult, cand: SideResult) -> Check | None:
    """Prefix-cache hits of each side over the timed waves, in tokens, with the hit rate
    (hit / queried tokens of the new requests admitted, vLLM's definition) in the note, where
    the workload turns caching on (the `prefix-cache` workload)."""
    if not _marked(base, cand, "prefix_cache"):
        return None
    metric, unit = "prefix_cache_coverage", "tokens"
    thr = ">= 1 prefix-cache hit on each side"
    kind = dict(delta_kind=DeltaKind.DIFFERENCE, bar=Bar(kind=BarKind.MIN_VALUE, value=1.0))
    method = ("prompt tokens each engine took from its prefix cache for the new requests it "
              "admitted, over the timed waves: its own counters (bundled scheduler; vLLM's "
              "vllm:prefix_cache_hits, of vllm:prefix_cache_queries)")
    got = {n: s.counters.get(PREFIX_HITS) for n, s in zip(SIDES, (base, cand))}
    b, c = got["baseline"], got["candidate"]
    why = _silent(got, "prefix-cache counts")
    if why:
        return Check(wl, metric, unit, b, c, None, None, None, thr, method, Verdict.INFO,
                     why, **kind)

    def rate(s: SideResult) -> str:
        r = s.counters.get(PREFIX_HIT_RATE)
        return (f"{s.counters[PREFIX_HITS]:.0f} of {s.counters.get(PREFIX_QUERIES, 0):.0f}"
                + ("" if r is None else f" ({r:.1%})"))
    counts = f"hit tokens {rate(base)} / {rate(cand)} (baseline / candidate)"
    none = [n for n in SIDES if not got[n]]
    if none:
        return Check(wl, metric, unit, b, c, None, None, None, thr, method, Verdict.INFO,
                     f"not measured: no prefix-cache hit on the {' and '.join(none)}, so "
                     f"token agreement here says nothing about cached prefixes; {counts}",
                     **kind)
    return Check(wl, metric, unit, b, c, c - b, None, None, thr, method, Verdict.PASS, counts,
                 **kind)
