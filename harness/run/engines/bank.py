"""The engines resident for a run, or for every run of a campaign: started a group at a time
(several at once), reused while their key is wanted, and rebuilt when their start compiled
kernels.

A run asks the bank for a start group of its plan (harness.run.engines.plan) before the group's
first workload. The bank closes every engine outside the group (its memory is needed),
keeps those inside it that are already resident while their peers are too (a campaign
whose sides both stay unchanged: `calibrate` starts each side's engines once; an engine
kept across runs is never measured against a freshly started peer, `_older_than_peers`
says why), and starts the rest, up to `starts_at_once` together: each engine is sent "open"
and answered as it finishes (harness.run.engines.worker.PendingOpen). Every start is recorded: when
it began and ended, how many other starts it overlapped, and what it wrote to the kernel-compile
caches.

Rebuilding (harness.run.engines.compile_cache says why): an engine whose start wrote to those caches
is started again in a new process before it is measured, and once more where that start still
wrote, less (`_rebuild`). Starts that overlap share the caches, so one that loaded
everything can see another's writes as its own; it is then rebuilt too, which costs a start
and never measures a process that compiled.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_for
from pathlib import Path
from typing import Any, Callable

from ..progress import Progress
from ..targets.base import Unsupported, get_target
from .compile_cache import cache_dirs, counting_writes, describe, file_counts, new_files
from .plan import PlannedEngine, StartGroup
from .preload import Preloader
from .start_phases import describe_phases, phases_of
from .worker import EngineTimeout, HostPool, shutdown_all

BankKey = tuple[str, Any]          # (side, the target's engine key)
MAX_REBUILDS = 2                   # new processes for an engine whose start compiled


@dataclass
class Resident:
    session: Any
    log: Path
    host: str | None                 # its HostPool key (None: in this process)
    start: dict                      # how it started (the manifest's record)
    run: int                         # the bank's run it started in
    served: int = 0                  # workloads it served in the current run


@dataclass
class BankSettings:
    """The isolation settings the bank works under (run_plan.Isolation, resolved)."""

    timeout_s: float
    in_process: bool = False
    cold_engines: str = "keep"         # "rebuild" | "keep"
    starts_at_once: int = 1
    open_order: tuple[str, ...] = ("candidate", "baseline")


@dataclass
class EngineBank:
    settings: BankSettings
    logs: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(
        prefix="mrbench-engine-logs-")))
    resident: dict[BankKey, Resident] = field(default_factory=dict)
    failed: dict[BankKey, Exception] = field(default_factory=dict)   # this run's failed starts
    run: int = -1
    starts: list[dict] = field(default_factory=list)   # every start of the current run
    # the preloading processes of the current run (harness.run.engines.preload), by log, and those
    # whose outcome the progress log said; whether the current round's engines are forked
    preloads: dict[Path, Preloader] = field(default_factory=dict)
    announced: set[Path] = field(default_factory=set)
    forking: bool = False
    used_logs: set[Path] = field(default_factory=set)  # logs of the current run's engines
    log_of: dict[BankKey, Path] = field(default_factory=dict)   # each engine's latest log
    # False once a rebuilt engine's start wrote to the caches again (a cache that does not
    # keep, or a tool that writes at every start): rebuilding then buys nothing
    rebuild_helps: bool = True

    def __post_init__(self) -> None:
        self.pool = HostPool(self.settings.timeout_s)
        self.t0 = time.perf_counter()

    # -- runs --------------------------------------------------------------------------
    def begin_run(self, settings: BankSettings) -> None:
        """A new run uses the bank: its settings, and fresh per-run records. Engines from
        the last run stay resident until a group that does not want them."""
        self.settings = settings
        self.pool.timeout_s = settings.timeout_s
        self.run += 1
        self.failed, self.starts, self.used_logs = {}, [], set()
        self.preloads, self.announced = {}, set()
        for r in self.resident.values():
            r.served = 0

    def get(self, key: BankKey) -> Resident | None:
        r = self.resident.get(key)
        if r is not None:
            self.used_logs.add(r.log)
        return r

    # -- groups ------------------------------------------------------------------------
    def prepare(self, group: StartGroup, key_of: Callable[[PlannedEngine], Any],
                prog: Progress) -> dict[BankKey, Exception]:
        """Make `group`'s engines resident: close the others, start what is missing (not
        what already failed to start in this run). {key: exception} of the starts that
        failed now."""
        wanted = {(e.side, key_of(e)): e for e in group.engines}
        self.discard(*[k for k in self.resident if k not in wanted])
        self.discard(*self._older_than_peers(wanted), retire=True)
        todo = [(k, e) for k, e in wanted.items()
                if k not in self.resident and k not in self.failed]
        for k, e in wanted.items():
            if k in self.resident:
                prog.side(e.side, "engine reused ("
                          + ("same engine shape" if self.resident[k].run == self.run
                             else "unchanged since an earlier run of this campaign") + ")")
        if not todo:
            return {}
        order = {s: i for i, s in enumerate(self.settings.open_order)}
        todo.sort(key=lambda t: order.get(t[1].side, len(order)))
        try:                                # every preloading process imports at once
            self.forking = self._fork_round(todo)
        except Exception:                   # noqa: BLE001 - each start says it, in its turn
            self.forking = False
        # one at a time, each engine is rebuilt before the next starts (a rebuild that
        # writes again spares the rest theirs); together, the group's rebuilds go together
        batches = [todo] if self.settings.starts_at_once > 1 else [[t] for t in todo]
        errors: dict[BankKey, Exception] = {}
        for batch in batches:
            refused = {e.workloads for k, e in todo if isinstance(errors.get(k), Unsupported)}
            if batch[0][1].workloads in refused:
                continue             # one at a time: a side refused the shape, so no other
                                     # side's start is spent on it
            errors.update(self._start_all(batch, prog))
            redo = [(k, e) for k, e in batch if k in self.resident
                    and self.resident[k].start["compile_cache_writes"]
                    and self.settings.cold_engines == "rebuild" and self.rebuild_helps]
            if redo:
                errors.update(self._rebuild(redo, prog))
        self.failed.update(errors)
        return errors

    def _older_than_peers(self, wanted: dict[BankKey, PlannedEngine]) -> list[BankKey]:
        """Resident engines from an earlier run of the campaign whose peer (the other side's
        engine of the same shape) starts now: an engine is measured only against one of
        its own age: a vLLM engine kept across runs steps slower from its third run on, so a
        kept baseline against a fresh candidate measured the candidate faster than it is
        (docs/performance.md, "Engines age"). So a side is kept
        across runs only while its peer is kept too (both sides of an A/A calibration);
        a fault run starts both. The retired engine's process ends with it (a new
        process, as its peer's)."""
        shapes_starting = {e.workloads for k, e in wanted.items()
                           if k not in self.resident and k not in self.failed}
        return [k for k, e in wanted.items()
                if k in self.resident and self.resident[k].run != self.run
                and e.workloads in shapes_starting]

    def _log_path(self, e: PlannedEngine) -> Path:
        base = f"{e.workloads[0]}.{e.side}"
        path, n = self.logs / f"{base}.log", 1
        while path.exists():            # a campaign starts this shape again (another fault)
            n += 1
            path = self.logs / f"{base}.{n}.log"
        return path

    def _host_key(self, side: str) -> str:
        """A pool key that no resident engine holds: each resident engine has its process;
        a healthy idle one of a target that reopens in its process is reused."""
        held = {r.host for r in self.resident.values()}
        i = 0
        while f"{side}/{i}" in held:
            i += 1
        return f"{side}/{i}"

    def _start_all(self, todo: list[tuple[BankKey, PlannedEngine]], prog: Progress
                   ) -> dict[BankKey, Exception]:
        """Start `todo`, up to starts_at_once together (one at a time in this process with
        --in-process); record each start."""
        errors: dict[BankKey, Exception] = {}
        times: dict[BankKey, tuple[float, float]] = {}
        records: dict[BankKey, dict] = {}
        dirs = cache_dirs()
        queue = list(todo)
        pending: dict[Any, tuple] = {}
        limit = 1 if self.settings.in_process else max(1, self.settings.starts_at_once)
        while queue or pending:
            while queue and len(pending) < limit:
                key, e = queue.pop(0)
                log = self.log_of[key] = self._log_path(e)
                prog.side(e.side, f"starting engine ({', '.join(e.workloads)})"
                          + (f", {len(pending)} others starting" if pending else ""))
                try:          # before its clock starts: the imports are the run's, not its
                    pre = None if self.settings.in_process else self._preloader(e, prog)
                except Exception as ex:             # noqa: BLE001 - a recorded failure
                    errors[key] = ex
                    continue
                t0 = time.perf_counter()
                if self.settings.in_process:
                    try:
                        sess, writes = counting_writes(
                            lambda: get_target(e.spec.target).open(e.spec, e.options))
                    except Exception as ex:         # noqa: BLE001 - a recorded failure
                        errors[key] = ex
                        continue
                    times[key] = (t0, time.perf_counter())
                    self.resident[key] = Resident(sess, log, None, {}, self.run)
                    records[key] = dict(compile_cache_writes=writes, pid=os.getpid(),
                                        phases=phases_of(t0, {}, getattr(
                                            sess, "start_phases", {})))
                    continue
                host = self._host_key(e.side)
                try:
                    before = file_counts(dirs)
                    p = self.pool.begin_open(host, e.spec.target, e.spec, e.options, log, pre)
                except Exception as ex:             # noqa: BLE001
                    errors[key] = ex
                    times[key] = (t0, time.perf_counter())
                    continue
                self.used_logs.add(log)
                self.resident[key] = Resident(None, log, host, {}, self.run)   # holds the key
                pending[p.conn] = (key, e, p, t0, before, host)
            if not pending:
                continue
            deadline = min(t0 for _, _, _, t0, _, _ in pending.values()) + self.pool.timeout_s
            ready = wait_for(list(pending), timeout=max(0.0, deadline - time.perf_counter()))
            for conn in ready:
                key, e, p, t0, before, host = pending.pop(conn)
                try:
                    sess = self.pool.finish_open(host, p)
                except Exception as ex:             # noqa: BLE001
                    errors[key] = ex
                    self.resident.pop(key, None)
                    times[key] = (t0, time.perf_counter())
                    prog.side(e.side, f"engine did not start after "
                              f"{time.perf_counter() - t0:.1f} s")
                    continue
                times[key] = (t0, time.perf_counter())
                self.resident[key].session = sess
                phases = phases_of(t0, sess.start_clock, sess.start_phases)
                records[key] = dict(compile_cache_writes=new_files(before, file_counts(dirs)),
                                    pid=sess.pid, python=sess.python, phases=phases,
                                    process=sess.host.started_by)
                prog.side(e.side, f"engine ready in {times[key][1] - t0:.1f} s"
                          + (f" ({where})" if (where := describe_phases(phases)) else ""))
            now = time.perf_counter()
            for conn, (key, e, p, t0, _, host) in list(pending.items()):
                if now - t0 > self.pool.timeout_s:            # hung: killed, a failure
                    pending.pop(conn)
                    self.resident.pop(key, None)
                    try:
                        p.host.timed_out("open")
                    except EngineTimeout as ex:
                        errors[key] = ex
                    times[key] = (t0, now)
        for key, (a, b) in times.items():
            others = sum(1 for k, (c, d) in times.items() if k != key and c < b and d > a)
            rec = dict(records.get(key, {}), side=key[0], workloads=list(
                next(e for k, e in todo if k == key).workloads),
                began_s=round(a - self.t0, 3), start_s=round(b - a, 3), overlapped=others,
                run=self.run, error=str(errors[key])[:300] if key in errors else None)
            if key in self.resident:
                self.resident[key].start = rec
            self.starts.append(rec)
        return errors

    def _fork_round(self, todo: list[tuple[BankKey, PlannedEngine]]) -> bool:
        """Whether the engines of `todo` are forked (every preloading process they need has
        finished its imports) or all spawned. Never waited for: a start that waited for the
        preloading process's imports took longer than one that imported its own beside the
        others (docs/performance.md, "Time to verdict on the vllm target"), so the first round of a
        run spawns while the imports run in the background, and its rebuilds and later rounds fork.
        One way for a whole round, so that the two sides of a shape start alike."""
        if self.settings.in_process:
            return False
        pres = [self.pool.preloader(e.spec, self.logs) for _, e in todo]
        return all(p is not None and p.poll(self.pool.timeout_s) is True for p in pres)

    def _preloader(self, e: PlannedEngine, prog: Progress) -> Preloader | None:
        """The preloading process `e`'s engine process is forked from in this round (None:
        it is spawned), recorded for the run's manifest with what became of it."""
        pre = self.pool.preloader(e.spec, self.logs)
        if pre is None:
            return None
        state = pre.poll(self.pool.timeout_s)
        if pre.log not in self.preloads:
            self.preloads[pre.log] = pre
            self.used_logs.add(pre.log)
        if pre.log not in self.announced and state is not None:
            self.announced.add(pre.log)
            prog.side(e.side, f"{e.spec.target} engine code imported once in "
                      f"{pre.ready_s:.1f} s ({pre.label}): engine processes are forked from it"
                      if state else "engine processes are spawned: the process importing "
                      f"their code failed ({pre.failure})")
        return pre if self.forking and state else None

    def _rebuild(self, redo: list[tuple[BankKey, PlannedEngine]], prog: Progress,
                 attempt: int = 1) -> dict[BankKey, Exception]:
        """Engines whose starts compiled kernels, started again in new processes that load
        them from the cache. A rebuilt start that still wrote, but less than the start
        before it, is rebuilt once more (up to MAX_REBUILDS): caches can fill in layers. On
        vLLM 0.26 the start that compiled puts its Triton kernels in the cache vLLM points
        Triton at as it compiles, and the start that loads the compiled model builds
        hundreds of them again into Triton's default cache, which a third start loads. A start that wrote as much as the one before it (a cache that does not keep)
        is measured as it is, recorded, and ends rebuilding for this bank."""
        firsts = {}
        for key, e in redo:
            r = self.resident[key]
            firsts[key] = r.start
            if r.host is None:
                r.start = dict(r.start, not_rebuilt="--in-process")
                prog.side(e.side, f"engine compiled kernels as it started "
                          f"({describe(r.start['compile_cache_writes'])}); measured as it is "
                          "(--in-process has no other process to start it in)")
                continue
            prog.side(e.side, ("engine compiled kernels as it started" if attempt == 1 else
                               "its new start compiled fewer kernels, but some")
                      + f" ({describe(r.start['compile_cache_writes'])}, "
                      f"{r.start['start_s']:.1f} s): starting it again in a new process, to "
                      "measure it with its kernels loaded from the cache")
        self.discard(*[k for k, _ in redo if self.resident[k].host is not None], retire=True)
        again = [(k, e) for k, e in redo if k not in self.resident]
        if not again:
            return {}
        try:
            self.forking = self._fork_round(again)
        except Exception:                   # noqa: BLE001 - each start says it, in its turn
            self.forking = False
        errors = self._start_all(again, prog)
        more = []
        for key, e in again:
            if key in self.resident:
                r = self.resident[key]
                wrote = sum(r.start["compile_cache_writes"].values())
                before = sum(firsts[key]["compile_cache_writes"].values())
                if wrote and wrote < before and attempt < MAX_REBUILDS:
                    more.append((key, e))
                elif wrote:
                    self.rebuild_helps = False
                    prog.side(key[0], f"its new start wrote again "
                              f"({describe(r.start['compile_cache_writes'])}): measured as it "
                              "is; no more rebuilds in this run (or its campaign)")
                r.start = dict(r.start, rebuilt_after=firsts[key])
        if more:
            errors.update(self._rebuild(more, prog, attempt + 1))
        return errors

    # -- closing -----------------------------------------------------------------------
    def discard(self, *keys: BankKey, retire: bool = False) -> None:
        """Close these engines together: each engine process is asked to close before any
        answer is read, then those that host one session a process end together
        (worker.shutdown_all); a broken one is retired either way. `retire` also ends each
        one's process, so that its next start is in a new one. One after another, a vLLM
        run's 12 engines took the sum of their closes (7 s before each run of a `faults`
        campaign started its engines)."""
        gone = [r for r in (self.resident.pop(k, None) for k in keys) if r is not None]
        closing = []
        for r in gone:
            begin = getattr(r.session, "begin_close", None)
            if begin is None:                  # an engine in this process
                self.discard_session(r)
            elif begin():
                closing.append(r.session)
        shutdown_all([s.host for s in closing if s.finish_close()])
        if retire:
            self.pool.retire(*[r.host for r in gone if r.host is not None])

    def end_run(self) -> None:
        """End the processes that host no resident engine. A process that hosts sessions one
        after another (`reopen_in_process`) keeps some memory of each; one run's worth was
        always fine, a campaign's (`faults quick`: 7 runs of 7 shapes, one at a time) grew
        two CPU engine processes past 12 GB each and the OOM killer took one. Resident
        engines stay for the next run."""
        held = {r.host for r in self.resident.values()}
        self.pool.retire(*[k for k in self.pool.hosts if k not in held])

    def close_all(self) -> None:
        self.discard(*self.resident)

    @staticmethod
    def discard_session(r: Resident) -> None:
        try:
            if r.session is not None:
                r.session.close()
        except Exception:                  # noqa: BLE001 - a broken engine is retired
            pass

    def kill_all(self) -> None:
        """After an interrupt: end every engine process at once (a host may be mid-call,
        and its pipe then holds a reply that a polite close would read as its own)."""
        self.pool.kill_all()
        self.resident.clear()

    def shutdown(self) -> None:
        """Close every engine, end the processes and remove the logs (each run copied the
        logs of its engines into its results)."""
        self.close_all()
        self.pool.shutdown()
        shutil.rmtree(self.logs, ignore_errors=True)
