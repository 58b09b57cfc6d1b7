"""The two sides as a pair: one engine or two (`cross_engine`), one runner or two
(`same_runner`), and how a check that may not gate is turned into a reported one
(`_not_gated`).

Shared by the dispatcher and the count checks. Two engines are not one code base at two
versions, so a difference between them is reported, not gated; one runner on both sides
makes the baseline's own counts the reference.
"""
from __future__ import annotations

from mrbench.contract import SideResult

from ..record.run_record import ACROSS_RUNS, Check, Verdict

# Why one run cannot judge vLLM's V2 against V1 on latency: their difference is by design and
# moves from one pair of engine instances to the next by more than a regression's size
RUNNERS_DIFFER = (f"{ACROSS_RUNS}: vLLM's V2 and V1 differ by design, and by more from one "
                  f"engine start to the next than a regression (docs/checks.md); "
                  f"`--history` judges this ratio against earlier runs', or compare two "
                  f"builds of one runner")


def cross_engine(base: SideResult, cand: SideResult) -> bool:
    return base.resolved.get("target", "bundled") != cand.resolved.get("target", "bundled")


def vllm_runners_differ(base: SideResult, cand: SideResult) -> bool:
    """Both sides are vLLM, on different model runners (V2 against V1)."""
    return not cross_engine(base, cand) and base.resolved.get("target") == "vllm" and \
        base.resolved.get("runner") != cand.resolved.get("runner")


def same_runner(base: SideResult, cand: SideResult) -> bool:
    """Both sides run one runner of one engine: two builds of it, or one build against
    itself. Their counts are then one code at two versions, so the baseline is the
    reference (counts_vs_baseline), not a stored file."""
    runner = base.resolved.get("runner")
    return not cross_engine(base, cand) and runner is not None and \
        runner == cand.resolved.get("runner")


def _not_gated(c: Check, why: str) -> Check:
    if c.verdict in (Verdict.PASS, Verdict.REGRESSION):
        c.verdict, c.note = Verdict.INFO, f"{why}; {c.note}" if c.note else why
    return c
