"""Counts: syncs, ops and allocations per step, against the baseline, a sync budget or a
stored reference.

For a fixed batch sequence these counts are deterministic, so they are compared directly,
without a statistical test: one extra sync or op a step shows without noise. A count is a
measurement only where the phases it counts in were seen to run (`not_measured`); otherwise
the check says so, as an error, never a pass.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from mrbench.contract import SideResult

from ..measure.phases import HOT_PHASES
from ..record import references
from ..record.references import LAUNCH_COLUMNS, count_means, launch_means
from ..record.run_record import NOT_GATED, Bar, BarKind, Check, DeltaKind, Verdict
from ..record.suite import Thresholds
from .sides import _not_gated, same_runner


def ranks_of(*sides: SideResult) -> list[int]:
    """The tensor-parallel ranks the sides' profiled passes were counted on (rows carry a
    `rank` where the runners ran in the ranks' workers); empty for one runner."""
    return sorted({int(r["rank"]) for s in sides for r in s.profile if "rank" in r})


def on_rank(side: SideResult, rank: int) -> SideResult:
    """The side as one rank saw it: its profile rows of that rank only (none: the rank
    counted nothing, and its checks say "not measured"). A side whose runner ran in one
    process (no row has a rank: the bundled runner, or vLLM at tensor_parallel_size 1
    against a side at 2) is the same runner for every rank of the other side, so each rank
    is held against the whole of it."""
    if side.profile and not any("rank" in r for r in side.profile):
        return side
    return replace(side, profile=[r for r in side.profile if r.get("rank") == rank])


def rank_checks(make: Callable[[SideResult, SideResult], list[Check | None]],
                base: SideResult, cand: SideResult) -> list[Check | None]:
    """`make`'s checks on the sides, or, where the runners ran in tensor-parallel ranks,
    on each rank of either side, each check named for its rank (`syncs_per_step[rank1]`):
    every rank is gated, and one that measured nothing is not measured, never a pass."""
    ranks = ranks_of(base, cand)
    if not ranks:
        return make(base, cand)
    out: list[Check | None] = []
    for r in ranks:
        for c in make(on_rank(base, r), on_rank(cand, r)):
            if c is not None:
                c.metric = f"{c.metric}[rank{r}]"
            out.append(c)
    return out


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


def _unmeasured_check(wl: str, metric: str, unit: str, why: str, threshold: str,
                      bar: Bar) -> Check:
    return Check(wl, metric, unit, None, None, None, None, None, threshold,
                 "deterministic count in the harness's phase ranges (torch.profiler)",
                 Verdict.ERROR, why, delta_kind=DeltaKind.DIFFERENCE, bar=bar)


def _budget(th: Thresholds) -> dict[str, float]:
    """The sync budget as a further bound of a bar (`Bar.also`), where the suite sets one."""
    return {} if th.syncs_budget is None else {"budget": th.syncs_budget}


def _count_bar(th: Thresholds) -> Bar:
    """Ops per phase over the reference (baseline or stored) by more than ops_increase, or
    allocations by more than allocs_increase."""
    return Bar(kind=BarKind.MAX_INCREASE, value=th.ops_increase,
               also=dict(allocs=th.allocs_increase))


def sync_check(wl: str, base: SideResult, cand: SideResult, th: Thresholds,
               relative: bool = True) -> Check | None:
    """Hot-path syncs per step: over the baseline (same engine only) or over the budget of a
    runner that promises a sync-free hot path."""
    if not cand.profile and not base.profile:
        return None                              # the workload profiles nothing
    thr = f"<= baseline + {th.syncs_increase}" + (
        f" and <= {th.syncs_budget}" if th.syncs_budget is not None else "")
    # across engines only the budget binds (the baseline's count is another engine's)
    bar = (Bar(kind=BarKind.MAX_INCREASE, value=th.syncs_increase, also=_budget(th))
           if relative else NOT_GATED if th.syncs_budget is None
           else Bar(kind=BarKind.MAX_VALUE, value=th.syncs_budget))
    why = not_measured(cand, "candidate") or (relative and not_measured(base, "baseline"))
    if why:
        return _unmeasured_check(wl, "syncs_per_step", "syncs/step", why, thr, bar)
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
                 f"candidate per phase: {phases}; {steps_with}/{len(cand.profile)} steps sync",
                 delta_kind=DeltaKind.DIFFERENCE, bar=bar)


def sync_warnings_check(wl: str, base: SideResult, cand: SideResult, th: Thresholds
                        ) -> Check | None:
    """vLLM's own sync checker (`--vllm-sync-check warn`): its warnings per step on the
    candidate. A runner that promises a sync-free hot path is held to the sync budget; any
    candidate to its baseline. Not measured when the checker never armed on a side."""
    if "sync_check_warnings" not in cand.counters:
        return None                              # the checker was not asked for
    thr = "<= baseline" + (f" and <= {th.syncs_budget}/step" if th.syncs_budget is not None
                           else "")
    bar = Bar(kind=BarKind.MAX_INCREASE, value=0.0, also=_budget(th))
    for side, name in ((cand, "candidate"), (base, "baseline")):
        if not side.counters.get("sync_check_armed"):
            return _unmeasured_check(
                wl, "sync_check_warnings", "warnings/step",
                f"not measured: vLLM's VLLM_GPU_SYNC_CHECK never armed on the {name} (vLLM "
                "arms it on CUDA only, after warmup)", thr, bar)

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
                 else Verdict.PASS, note + (f"; sites: {sites}" if sites else ""),
                 delta_kind=DeltaKind.DIFFERENCE, bar=bar)


def count_info(wl: str, metric: str, column: str, base: SideResult,
               cand: SideResult) -> Check | None:
    b, c = _per_step_mean(base, column), _per_step_mean(cand, column)
    if b is None and c is None:
        return None
    why = not_measured(cand, "candidate") or not_measured(base, "baseline")
    if why:
        return _unmeasured_check(wl, metric, "per step", why, "-", NOT_GATED)
    judge = "launches_vs_baseline" if column == "launches" else "ops_vs_baseline"
    why = (f"one runner on both sides: judged per phase by {judge}"
           if same_runner(base, cand) else "runners differ by design")
    return Check(wl, metric, "per step", b, c, None if b is None or c is None else c - b, None,
                 None, "-", f"deterministic count (torch.profiler); {why}", Verdict.INFO,
                 delta_kind=DeltaKind.DIFFERENCE, bar=NOT_GATED)


def _count_excess(now: dict[str, float], ref: dict[str, float],
                  th: Thresholds) -> tuple[dict[str, float], str]:
    """({column: excess} over the bars, a line listing every count that moved): per phase
    ops (`ops_*`) and allocations; the total `ops` is shown, its phases are judged."""
    totals = ("ops",) + LAUNCH_COLUMNS             # shown; their phases are judged

    def bar(c: str) -> float:
        return (th.allocs_increase if c == "allocs" else th.launches_increase
                if c.startswith(LAUNCH_COLUMNS) else th.ops_increase)
    over = {c: now[c] - ref[c] for c in now if c in ref and c not in totals
            and now[c] - ref[c] > bar(c)}
    diffs = ", ".join(f"{c} {ref[c]:.1f} -> {now[c]:.1f}" for c in now
                      if c in ref and abs(now[c] - ref[c]) > 1e-9) or "identical counts"
    return over, diffs


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
        return _unmeasured_check(wl, "ops_vs_baseline", "per step", why, thr, _count_bar(th))
    over, diffs = _count_excess(now, ref, th)
    check = Check(wl, "ops_vs_baseline", "per step", ref.get("ops"), now.get("ops"),
                  None if "ops" not in ref or "ops" not in now else now["ops"] - ref["ops"],
                  None, None, thr, "deterministic count (torch.profiler), candidate against "
                  "baseline: the same runner on both sides",
                  Verdict.REGRESSION if over else Verdict.PASS, diffs,
                  delta_kind=DeltaKind.DIFFERENCE, bar=_count_bar(th))
    if len(base.profile) != len(cand.profile):
        return _not_gated(check, f"not the same batch sequence ({len(base.profile)} vs "
                                 f"{len(cand.profile)} profiled steps)")
    return check


def launches_vs_baseline(wl: str, base: SideResult, cand: SideResult,
                         th: Thresholds) -> Check | None:
    """CUDA kernel launches per step and phase (the runtime's and the driver's launch calls,
    Triton's included; graph replays counted apart), candidate against baseline, when both
    run the same runner. An aten op count misses a kernel that is no aten op (a Triton
    kernel), so one more kernel a decode step shows here and nowhere else; a launch count
    is as deterministic as an op count for a fixed batch sequence. On CPU there is no
    launch to count: not measured, and said so."""
    if not cand.profile and not base.profile:
        return None
    thr = f"per phase <= baseline + {th.launches_increase}"
    bar = Bar(kind=BarKind.MAX_INCREASE, value=th.launches_increase)
    now, ref = launch_means(cand.profile), launch_means(base.profile)
    if not now or not ref:
        devices = sorted({str(s.resolved.get("device", "cpu")) for s in (base, cand)})
        return Check(wl, "launches_vs_baseline", "per step", None, None, None, None, None, thr,
                     "kernel launch calls on the host (torch.profiler with CUDA activity)",
                     Verdict.INFO, f"not measured: no CUDA (kernel launches are CUDA runtime "
                     f"and driver calls; the sides ran on {', '.join(devices)})",
                     delta_kind=DeltaKind.DIFFERENCE, bar=bar)
    why = not_measured(cand, "candidate") or not_measured(base, "baseline")
    if why:
        return _unmeasured_check(wl, "launches_vs_baseline", "per step", why, thr, bar)
    over, diffs = _count_excess(now, ref, th)
    check = Check(wl, "launches_vs_baseline", "per step", ref.get("launches"),
                  now.get("launches"), now.get("launches", 0.0) - ref.get("launches", 0.0),
                  None, None, thr, "deterministic count of kernel launch calls per phase "
                  "(cudaLaunchKernel*, cuLaunchKernel*; cudaGraphLaunch apart), candidate "
                  "against baseline: the same runner on both sides",
                  Verdict.REGRESSION if over else Verdict.PASS, diffs,
                  delta_kind=DeltaKind.DIFFERENCE, bar=bar)
    if len(base.profile) != len(cand.profile):
        return _not_gated(check, f"not the same batch sequence ({len(base.profile)} vs "
                                 f"{len(cand.profile)} profiled steps)")
    return check


def reference_check(wl: str, cand: SideResult, reference: dict | None,
                    th: Thresholds) -> Check | None:
    """Candidate ops (per phase), allocations and, where the reference holds them, kernel
    launches per step vs its own stored reference."""
    now = {**count_means(cand.profile), **launch_means(cand.profile)}
    if not now:
        return None
    why = not_measured(cand, "candidate")
    if why:
        return _unmeasured_check(wl, "ops_vs_reference", "per step", why,
                                 f"<= reference + {th.ops_increase}", _count_bar(th))
    if reference is None:
        return Check(wl, "ops_vs_reference", "per step", None, now.get("ops"), None, None, None,
                     f"<= reference + {th.ops_increase}", "deterministic count (torch.profiler)",
                     Verdict.INFO, "no stored reference for this build and workload "
                     "(mrbench run ... --save-reference)", delta_kind=DeltaKind.DIFFERENCE,
                     bar=_count_bar(th))
    stale = references.key_mismatch(reference, cand.resolved)
    if stale:
        return Check(wl, "ops_vs_reference", "per step", None, now.get("ops"), None, None,
                     None, f"<= reference + {th.ops_increase}",
                     "deterministic count (torch.profiler)", Verdict.INFO,
                     f"not measured: the stored reference is for another build ({stale})",
                     delta_kind=DeltaKind.DIFFERENCE, bar=_count_bar(th))
    ref = reference["counts"]
    over, diffs = _count_excess(now, ref, th)
    return Check(wl, "ops_vs_reference", "per step", ref.get("ops"), now.get("ops"),
                 None if "ops" not in ref else now["ops"] - ref["ops"], None, None,
                 f"per phase <= reference + {th.ops_increase} (allocs + {th.allocs_increase})",
                 f"deterministic count vs the stored reference of {reference.get('git_sha') or '?'}"
                 f" ({reference.get('steps')} steps)",
                 Verdict.REGRESSION if over else Verdict.PASS, diffs,
                 delta_kind=DeltaKind.DIFFERENCE, bar=_count_bar(th))
