"""Candidate vs baseline: one check per metric, each with its method, CI, p-value and verdict.

A latency or accuracy regression must be statistically significant (at the suite's alpha)
AND beyond the suite's practical threshold; counts that are deterministic for a fixed
workload (syncs, state-audit violations) are compared directly.

The checks live by family beside this module (latency, correctness, counts, state,
coverage, spec); `compare` runs them for one workload and decides which of them may gate.
"""
from __future__ import annotations

from mrbench.contract import SideResult

from ..measure.canary import MAX_OFF_CPU, off_cpu_share
from ..record.run_record import Check
from ..record.suite import Thresholds
from .correctness import (
    accuracy_check,
    agreement_check,
    exact_streams_check,
    is_sampled,
    parity_check,
    sampled_check,
)
from .counts import (
    count_info,
    counts_vs_baseline,
    launches_vs_baseline,
    rank_checks,
    ranks_of,
    reference_check,
    sync_check,
    sync_warnings_check,
)
from .coverage import chunk_coverage_check, dispatch_check
from .graphs import graph_mode_check
from .kv_cache import preemption_check, prefix_cache_check
from .kv_transfer import kv_transfer_check
from .latency import latency_check
from .logprobs import logprobs_check
from .sides import RUNNERS_DIFFER, _not_gated, cross_engine, same_runner, vllm_runners_differ
from .spec import spec_check
from .state import audit_check


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
    elif vllm_runners_differ(base, cand):
        checks = [_not_gated(c, RUNNERS_DIFFER) for c in checks]
    samplers = base.resolved.get("sampler"), cand.resolved.get("sampler")
    exact = is_sampled(cand) and same_runner(base, cand) and samplers[0] == samplers[1]
    agree = (parity_check(wl, base, cand, th) if cross
             else exact_streams_check(wl, base, cand, th) if exact
             else agreement_check(wl, base, cand, th))
    if agree is not None and is_sampled(cand) and samplers[0] != samplers[1]:
        agree = _not_gated(agree, "the runners' samplers differ, so equal seeded streams are "
                                  "not promised (sampled_distribution judges)")
    checks += [accuracy_check(wl, base, cand, th), agree, sampled_check(wl, base, cand, th),
               chunk_coverage_check(wl, base, cand), preemption_check(wl, base, cand),
               prefix_cache_check(wl, base, cand), kv_transfer_check(wl, base, cand),
               *rank_checks(lambda b, c: [
                   sync_check(wl, b, c, th, relative=not cross),
                   count_info(wl, "ops_per_step", "ops", b, c),
                   count_info(wl, "allocs_per_step", "allocs", b, c),
                   count_info(wl, "launches_per_step", "launches", b, c),
                   counts_vs_baseline(wl, b, c, th) if same_runner(b, c) else None,
                   launches_vs_baseline(wl, b, c, th) if same_runner(b, c) else None],
                   base, cand),
               sync_warnings_check(wl, base, cand, th),
               audit_check(wl, cand, th),
               # a stored reference holds one runner's counts: not a rank's
               None if ranks_of(base, cand) else reference_check(wl, cand, reference, th),
               dispatch_check(wl, base, cand), graph_mode_check(wl, base, cand)]
    logprobs = logprobs_check(wl, base, cand)
    if logprobs is not None and cross:
        logprobs = _not_gated(logprobs, "cross-engine logprobs: the kernels differ, so the "
                                        "rounding bound does not hold; reported, not gated")
    checks.append(logprobs)
    spec = spec_check(wl, base, cand, th)
    if spec is not None and cross:
        spec = _not_gated(spec, "cross-engine acceptance: reported, not gated")
    checks.append(spec)
    return [c for c in checks if c is not None]
