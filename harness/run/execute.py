"""Drive one batch workload on both sides at once: interleaved timed waves, then a short
profiled pass per side.

Why interleave: on a shared 2-core machine the speed drifts by tens of percent over minutes,
so a baseline timed first and a candidate timed minutes later differ by the machine, not the
code. The prompts are cut into waves (each wave arrives at once, like `vllm bench throughput`
on a slice); the sides alternate per wave in ABBA order, so both see the same machine and
neither is always second. The timed waves run unprofiled; the profiled pass then repeats the
first `profile_limit` prompts under torch.profiler (counts are per step and deterministic, so
a short pass is enough). Warmup ran when each session opened, before any of it.
"""
from __future__ import annotations

import gc
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, replace

import numpy as np

from mrbench.contract import Batch, Completion, Session, SideFailure, SideResult, TimedPrompt

from ..measure import canary
from ..measure.latency import inter_token_latencies, request_latency, step_rows
from ..measure.profiler import count_per_step, profiled
from . import progress


def describe_failure(e: BaseException) -> tuple[str, str]:
    """(one-line error, traceback); for an exception raised inside an engine's process
    (mrbench.harness.run.engines.worker.RemoteError) its own type, message and traceback."""
    remote_tb = getattr(e, "remote_traceback", None)
    if remote_tb is not None:
        return str(e), remote_tb
    return f"{type(e).__name__}: {e}", traceback.format_exc(limit=8)


def wave_order(sides: list[str], wave: int) -> list[str]:
    """ABBA: even waves in the given order, odd waves reversed."""
    return list(sides) if wave % 2 == 0 else list(reversed(sides))


def completion_row(i: int, c: Completion) -> dict:
    """One request's latency row (vLLM's definitions), plus queueing, KV hand-off, the
    prefill instance's part of TTFT (PD) and spec decode counts where the engine had them."""
    row = dict(req_index=i, prompt_tokens=len(c.prompt_token_ids), output_tokens=len(c.token_ids),
               finish_reason=c.finish_reason,
               queue_ms=None if c.first_scheduled_time is None
               else (c.first_scheduled_time - c.arrival_time) * 1e3,
               kv_handoff_ms=None if c.kv_handoff_s is None else c.kv_handoff_s * 1e3,
               prefill_ms=None if c.prefill_done_time is None
               else (c.prefill_done_time - c.arrival_time) * 1e3,
               **request_latency(c))
    if c.kv_arrived is not None:        # PD through NIXL: what the decode engine pulled
        row.update(kv_bytes=c.kv_bytes, kv_arrived=c.kv_arrived)
    if c.num_drafts is not None:
        row.update(num_drafts=c.num_drafts, num_draft_tokens=c.num_draft_tokens,
                   num_accepted_tokens=c.num_accepted_tokens)
        row.update({f"accepted_pos_{j}": n for j, n in enumerate(c.accepted_per_pos or [])})
    return row


def dispatch_rows(log: list[tuple[str, str]]) -> list[dict]:
    counts: dict[tuple[str, str], int] = {}
    for phase, kind in log:
        counts[(phase, kind)] = counts.get((phase, kind), 0) + 1
    return [dict(phase=p, kind=k, steps=n) for (p, k), n in sorted(counts.items())]


def _collect_dispatch(session: Session, res: SideResult, since: int) -> None:
    """The engine start's classes (phase "warmup", and "dummy" for runs that warm nothing)
    and the classes served since `since` (an engine reused across workloads keeps one log;
    each workload sees its own serving steps)."""
    log = session.dispatch_log()
    res.dispatch = dispatch_rows([e for e in log[:since] if e[0] != "serve"] + log[since:])


def _submit(session: Session, prompts: list, batch: Batch, closed: bool = False,
            first: int = 0) -> list[Completion]:
    """Run `prompts` (batch.prompts[first:first + len(prompts)]) on `session`."""
    if prompts and isinstance(prompts[0], TimedPrompt):
        t_first = min(p.arrival_s for p in prompts)
        return session.serve([replace(p, arrival_s=0.0 if closed else p.arrival_s - t_first)
                              for p in prompts])
    # logprobs only where asked: a session (or a stand-in) need not know the argument
    extra = {} if batch.logprobs is None else dict(logprobs=batch.logprobs)
    if batch.sampling is None:
        return session.generate(prompts, batch.max_tokens, batch.stop, **extra)
    return session.generate(prompts, batch.max_tokens, batch.stop,
                            batch.sampling.window(first, first + len(prompts)), **extra)


@contextmanager
def _frozen_waves() -> Iterator[None]:
    """The timed waves of one workload, each after a full collection whose survivors are
    frozen (`gc.freeze`, as vLLM freezes its heap after start), unfrozen after the last.

    Why: the collection before each wave keeps one side's garbage off the other side's clock,
    but a full collection walks every object this process holds (torch, the data, the run's
    records so far): 120-230 ms a wave on a 2-core machine, about 70 times in a `quick` run,
    while both engines wait. Frozen survivors are not walked again, so each later collection
    walks only what the last wave left. Unfrozen at the end, so garbage among them is
    collected with the workload's first collection of the next."""
    try:
        yield
    finally:
        gc.unfreeze()


def _timed_wave(session: Session, res: SideResult, prompts: list, first_index: int,
                batch: Batch) -> list[Completion]:
    gc.collect()              # the other side's garbage is not collected on this side's clock
    gc.freeze()               # and what outlived it is not walked again (_frozen_waves)
    session.reset_steps()
    t0 = time.perf_counter()
    comps = _submit(session, prompts, batch, first=first_index)
    res.wall_s += time.perf_counter() - t0
    for j, c in enumerate(comps):
        i = first_index + j
        res.requests.append(completion_row(i, c))
        res.itl.extend(dict(req_index=i, itl_ms=x) for x in inter_token_latencies(c))
        res.tokens.append(c.token_ids)
    return comps


def profiled_run(session: Session, prompts: list, batch: Batch, device: str
                 ) -> tuple[list[dict], list[dict]]:
    """Run `prompts` at once under torch.profiler (counts need shapes, not timing), with
    state audits on; (per-step counts, audit rows). Runs in the engine's own process when the
    session is remote (mrbench.harness.run.engines.worker), since the profiler sees only its own
    process."""
    session.reset_steps()
    session.auditing = True      # state audits read the device: only in this pass
    # runners in vLLM's workers (tensor parallel, a process per runner): each rank profiles
    # its own part and counts it there (targets/vllm/ranks.py); rows per engine and rank
    ranks = getattr(session, "ranks", None)
    try:
        # then the engine's process holds no runner: profile the ranks only
        with (nullcontext() if ranks is not None else profiled(device)) as prof, \
                (ranks.profiling(device, session.phase_labels) if ranks is not None
                 else nullcontext()) as per_rank:
            _submit(session, prompts, batch, closed=True)
    finally:
        session.auditing = False
    steps = step_rows(session.steps())
    if per_rank is None:
        counts = count_per_step(prof.events, session.step_label, session.phase_labels, device)
        _label_steps(counts, steps)
    else:
        for instance, _, rows in per_rank.sources:   # a rank counts its own engine's steps
            _label_steps(rows, [st for st in steps if st["instance"] == instance])
        counts = per_rank.table()
    return counts, [asdict(a) for a in session.audits()]


def _label_steps(rows: list[dict], steps: list[dict]) -> None:
    """Give each counted step the session's account of it (both in time order)."""
    for row, st in zip(rows, steps):
        row.update(instance=st["instance"], kind=st["kind"], num_reqs=st["num_reqs"])


def _profiled_pass(session: Session, res: SideResult, batch: Batch, device: str) -> None:
    prompts = batch.prompts[:batch.profile_limit]
    remote = getattr(session, "profiled_run", None)
    res.profile, res.audits = (remote(prompts, batch, device) if remote
                               else profiled_run(session, prompts, batch, device))


def pair_bounds(n_waves: int, pairs: int) -> list[int]:
    """The first wave of each engine pair's share of `n_waves`: equal shares of an even
    number of waves (an ABBA wave pair is never cut), the last taking what is left; fewer
    pairs where the waves are too few for each to have two."""
    pairs = max(1, min(pairs, n_waves // 2))
    share = (n_waves // pairs) // 2 * 2
    return [k * share for k in range(pairs)]


FreshSessions = Callable[[], dict[str, Session]]


def drive_interleaved(sessions: dict[str, Session], batch: Batch, device: str,
                      engine_pairs: int = 1, fresh_sessions: FreshSessions | None = None
                      ) -> tuple[dict[str, SideResult], dict[str, list[Completion]],
                                 dict[str, SideFailure]]:
    """Run `batch` on every session; a side that raises drops out, the others finish.

    `engine_pairs` > 1 (with `fresh_sessions`, which closes both sides' engines and starts
    them again in new processes): the timed waves are cut into that many equal shares, each
    on a pair of engines of its own, and every row records its pair (`engine_pair`). Why:
    a host-bound engine process keeps a speed of its own for life (where its threads,
    memory and code landed), so one pair's ratio carries that offset however many waves it
    runs; only more pairs average it (docs/vllm-gpu.md, "Engine pairs"). The profiled pass
    runs on the last pair."""
    results = {s: SideResult(resolved=sess.resolved()) for s, sess in sessions.items()}
    comps: dict[str, list[Completion]] = {s: [] for s in sessions}
    failed: dict[str, SideFailure] = {}
    busy = {s: 0.0 for s in sessions}            # each side's own time in this workload
    prog = progress.current()
    marks = {s: len(sess.dispatch_log()) for s, sess in sessions.items()}

    def attempt(side: str, fn, *args) -> None:
        if side in failed:
            return
        t0 = time.perf_counter()
        try:
            fn(*args)
        except Exception as e:    # a crashed side is a recorded failure, not a lost run
            failed[side] = SideFailure(*describe_failure(e))
            if prog:
                prog.side(side, f"FAILED after {time.perf_counter() - t0:.1f} s: "
                                f"{failed[side].error[:200]}")
        finally:
            busy[side] += time.perf_counter() - t0

    pair = 0

    def wave(side: str, w: int, pos: int, lo: int, hi: int) -> None:
        """Wave w of one side; `pos` is its place in the wave (0: ran first), kept on every
        row so the gate can tell a run-order effect from a difference of the sides."""
        res = results[side]
        n_itl = len(res.itl)
        cs = _timed_wave(sessions[side], res, batch.prompts[lo:hi], lo, batch)
        tags = dict(wave=w, wave_pos=pos, engine_pair=pair)
        for row in res.requests[lo:hi] + res.itl[n_itl:]:
            row.update(tags)
        comps[side].extend(cs)
        rows = step_rows(sessions[side].steps())
        watch = canary.current()
        if watch is not None and rows:     # the time the machine itself took from each step
            t0 = np.array([r["t_start_s"] for r in rows])
            lost = watch.machine_lost_ms(t0, t0 + np.array([r["duration_ms"] for r in rows])
                                         / 1e3)
            for r, x in zip(rows, lost):
                r["machine_lost_ms"] = float(x)
        res.steps.extend(dict(r, **tags) for r in rows)
        for k, v in sessions[side].counters().items():
            res.counters[k] = res.counters.get(k, 0) + v

    def new_pair() -> None:
        """Close both sides' engines and start a new pair; a start that fails fails every
        side still running (the waves would compare engines of different ages)."""
        nonlocal sessions, pair
        t0 = time.perf_counter()
        try:
            fresh = fresh_sessions()
        except Exception as e:       # noqa: BLE001 - recorded, as a side's crash is
            err = SideFailure(*describe_failure(e))
            failed.update({s: err for s in sessions if s not in failed})
            return
        for s in sessions:                 # the dispatch log of the new engine, from here
            marks[s] = len(fresh[s].dispatch_log())
        sessions, pair = fresh, pair + 1
        if prog:
            prog.line(f"engine pair {pair + 1}/{len(firsts)} started in "
                      f"{time.perf_counter() - t0:.0f} s")

    size = max(1, batch.wave_size)
    starts = list(range(0, len(batch.prompts), size))
    firsts = pair_bounds(len(starts), engine_pairs if fresh_sessions else 1)
    with _frozen_waves():
        for w, lo in enumerate(starts):
            if w in firsts[1:]:
                new_pair()
                if len(failed) == len(sessions):
                    break
            for pos, side in enumerate(wave_order(list(sessions), w)):
                attempt(side, wave, side, w, pos, lo, min(lo + size, len(batch.prompts)))
            if prog:
                prog.wave(w + 1, len(starts))
    profiled_s = dict.fromkeys(sessions, 0.0)
    if batch.profile_limit > 0:
        for side, sess in sessions.items():
            before = busy[side]
            attempt(side, _profiled_pass, sess, results[side], batch, device)
            profiled_s[side] = busy[side] - before
    for side, sess in sessions.items():
        attempt(side, _collect_dispatch, sess, results[side], marks[side])

    def refresh(side: str) -> None:      # what only the end knows (e.g. sync-check sites)
        results[side].resolved = sessions[side].resolved()
    for side in sessions:
        attempt(side, refresh, side)
        if prog and side not in failed:
            prog.side(side, f"done in {busy[side]:.1f} s ({len(starts)} waves"
                            + (f", profiled pass {profiled_s[side]:.1f} s"
                               if batch.profile_limit > 0 else "") + ")")
    ok = {s: r for s, r in results.items() if s not in failed}
    return ok, {s: c for s, c in comps.items() if s not in failed}, failed


@dataclass(frozen=True)
class InterleavedDriver:
    """The `Driver` (mrbench.contract) the orchestrator lends a workload: its batches run
    through `drive_interleaved` on this device."""

    device: str
    engine_pairs: int = 1                      # the suite entry's (drive_interleaved)
    fresh_sessions: FreshSessions | None = None

    def interleaved(self, sessions: dict[str, Session], batch: Batch
                    ) -> tuple[dict[str, SideResult], dict[str, list[Completion]],
                               dict[str, SideFailure]]:
        return drive_interleaved(sessions, batch, self.device, self.engine_pairs,
                                 self.fresh_sessions)
