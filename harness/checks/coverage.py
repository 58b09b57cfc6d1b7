"""Coverage: whether the run exercised what it is taken to have exercised.

A serving dispatch class the warmup never ran pays its compile or capture inside the timed
waves (`dispatch_check`). Token agreement on chunked prefill says nothing about the middle
chunks unless some prompt ran in enough of them (`chunk_coverage_check`); a side that ran
none is reported as not measured, never a pass.
"""
from __future__ import annotations

from mrbench.contract import SideResult

from ..measure import prefill_chunks
from ..record.run_record import Bar, BarKind, Check, DeltaKind, Verdict


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
                 Verdict.REGRESSION if c else Verdict.PASS, note, delta_kind=DeltaKind.NONE,
                 bar=Bar(kind=BarKind.MAX_VALUE, value=0.0))


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
    # gates nothing itself: a side under the bound is "not measured" (info), never a pass
    kind = dict(delta_kind=DeltaKind.DIFFERENCE, bar=Bar(kind=BarKind.MIN_VALUE, value=1.0))
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
                     "disk); reported, not judged", **kind)
    short = [n for n, (p, _) in got.items() if not p]
    if short:
        return Check(wl, metric, unit, b, c, None, None, None, thr, method, Verdict.INFO,
                     f"not measured: no prompt ran in >= {want} prefill chunks on the "
                     f"{' and '.join(short)} (max_num_batched_tokens too large for the "
                     f"prompts?), so token agreement here says nothing about middle chunks; "
                     f"{counts}", **kind)
    return Check(wl, metric, unit, b, c, c - b, None, None, thr, method, Verdict.PASS, counts,
                 **kind)
