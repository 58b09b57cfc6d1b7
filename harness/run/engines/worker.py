"""Each side's engine in its own process, so a crash or a hang is a recorded failure.

Why: an engine can die in native code (a segfault in a kernel, an OOM kill) or stop making
progress (a deadlocked scheduler, a collective that never returns). In-process, either takes
the whole `mrbench run` with it and the other workloads never report. Here the harness talks
to a child process through a pipe; every call has a deadline. A child that dies is an
`EngineCrashed` (with its exit code or signal and the tail of its log), a call past its
deadline kills the child and is an `EngineTimeout`. The driver turns both into a side
failure (exit 3) and carries on.

The child is forked from a preloading process that imported its code once and has no
threads or device handles to copy half-way (harness.run.engines.preload), or spawned (on the CPU,
`MRBENCH_ENGINE_START=spawn`, or where no preloading process came up); never forked from the
harness, whose torch holds threads. It opens the real session and answers calls; its
stdout and stderr go to a log file, because engines print (vLLM logs every load) and the
harness's own output must stay readable. The profiled pass runs inside the child, since
torch.profiler only sees the process it runs in.

Timestamps cross the boundary as `time.perf_counter()` values: CLOCK_MONOTONIC on Linux, one
clock for every process on the machine.
"""
from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
import weakref
from pathlib import Path
from typing import Any

from mrbench.contract import BadInput, EngineOptions

from ..builds import Build, resolve
from ..execute import profiled_run
from ..targets import get_target
from ..targets.base import SideSpec, Unsupported
from .compile_cache import counting_writes
from .preload import (Preloader, Preloaders, build_environment, forked_by, log_to,
                      start_method)

DEFAULT_CALL_TIMEOUT_S = 900.0       # one call: a wave, a profiled pass, an engine start
CLOSE_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 12

_FORWARDED = ("generate", "serve", "dispatch_log", "counters", "fits", "steps", "reset_steps",
              "audits", "resolved")


class _EngineGone(RuntimeError):
    def __init__(self, message: str, log_tail: str) -> None:
        last = next((ln.strip() for ln in reversed(log_tail.splitlines()) if ln.strip()), "")
        super().__init__(f"{type(self).__name__}: {message}" + (f"; log: {last}" if last else ""))
        self.remote_traceback = log_tail or "(the engine's log is empty)"


class EngineCrashed(_EngineGone):
    """The engine's process died (exit code, signal); the last log line is in the message,
    the log's tail in `remote_traceback`."""


class EngineTimeout(_EngineGone):
    """A call did not return before its deadline; the engine's process was killed."""


class RemoteError(RuntimeError):
    """An exception raised inside the engine's process, with its type name and traceback."""

    def __init__(self, type_name: str, message: str, tb: str) -> None:
        one_line = " | ".join(ln.strip() for ln in message.splitlines() if ln.strip())
        super().__init__(f"{type_name}: {one_line[:600]}")
        self.type_name, self.remote_traceback = type_name, tb


def _child(conn, env: dict[str, str] | None = None) -> None:
    """The engine's process: open a session, answer its calls until it is closed, then wait
    for the next one (a target that cannot be reopened in one process says so: its process
    then exits after one session). `env`: the harness's environment variables when it asked
    for this process, which a forked process takes as its own (a spawned one has them)."""
    serving_since = time.perf_counter()  # the interpreter and the harness's imports are done
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)

    def reply_error(e: BaseException) -> None:
        status = ("bad_input" if isinstance(e, BadInput) else
                  "unsupported" if isinstance(e, Unsupported) else "error")
        conn.send((status, (type(e).__name__, str(e), traceback.format_exc(limit=12))))

    while True:
        try:
            name, args = conn.recv()
        except EOFError:                 # the parent is gone
            return
        if name != "open":
            reply_error(ValueError(f"call {name!r} without an open session"))
            continue
        target_name, spec, options, log_path = args
        opened = time.perf_counter()
        log_to(log_path)
        target = get_target(target_name)
        try:
            session, writes = counting_writes(lambda: target.open(spec, options))
            conn.send(("ok", dict(vocab_size=session.vocab_size, step_label=session.step_label,
                                  phase_labels=dict(session.phase_labels),
                                  compile_cache_writes=writes, pid=os.getpid(),
                                  python=sys.executable,
                                  start_clock=dict(serving_since=serving_since, opened=opened,
                                                   ready=time.perf_counter()),
                                  start_phases=dict(getattr(session, "start_phases", {})))))
        except BaseException as e:       # noqa: BLE001 - everything goes back to the parent
            traceback.print_exc()
            reply_error(e)
            if getattr(target, "reopen_in_process", False):
                continue
            return                       # a half-started engine may have left global state
        while True:
            try:
                name, args = conn.recv()
            except EOFError:
                return
            if name == "close":
                try:
                    session.close()
                finally:
                    conn.send(("ok", None))
                break
            try:
                if name == "profiled_run":
                    result = profiled_run(session, *args)
                elif name in _FORWARDED:
                    result = getattr(session, name)(*args)
                else:
                    raise ValueError(f"unknown call {name!r}")
                conn.send(("ok", result))
            except BaseException as e:   # noqa: BLE001
                traceback.print_exc()
                reply_error(e)
        del session
        if not getattr(target, "reopen_in_process", False):
            return


def _tail(path: Path, n: int = LOG_TAIL_LINES) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


_LIVE: weakref.WeakSet = weakref.WeakSet()     # engine processes started by this harness


@atexit.register
def _kill_left_over() -> None:
    """At exit, end every engine process still running (registered after multiprocessing's
    own exit handler, so it runs first: that handler joins non-daemonic children)."""
    for proc in list(_LIVE):
        if proc.is_alive():
            proc.kill()
            proc.join(10)


class EngineHost:
    """One engine process (spawned), reused for the sessions of one side while it is healthy
    and its target can reopen in a process; `EngineTimeout`/`EngineCrashed` retire it."""

    def __init__(self, timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
                 build: Build | None = None, preloader: Preloader | None = None) -> None:
        """A new engine process in `build`'s environment (None: the harness's): forked by
        `preloader` where it is ready (harness.run.engines.preload), else spawned."""
        forked = preloader is not None and preloader.ready_s is not None
        ctx = mp.get_context("forkserver" if forked else "spawn")
        self.timeout_s = timeout_s
        self.conn, child = ctx.Pipe()
        # not daemonic: a daemonic process may not start children, and vLLM's tensor-
        # parallel executor starts one worker process per rank; `_kill_left_over` ends
        # engines still running when the harness exits, as a daemon's end would
        self.proc = ctx.Process(target=_child, args=(child, dict(os.environ) if forked else
                                                     None),
                                name="mrbench-engine", daemon=False)
        self.started_by = "preloaded fork" if forked else "spawn"
        with build_environment(build.python if build else None,
                               build.sys_path if build else None):
            if forked:
                with forked_by(preloader.server):
                    self.proc.start()
            else:
                self.proc.start()
        _LIVE.add(self.proc)
        child.close()
        self.log_path = Path(os.devnull)
        self.build = build

    def usable(self) -> bool:
        return self.proc.is_alive() and not self.conn.closed

    def call(self, name: str, *args: Any) -> Any:
        self.send(name, *args)
        return self.answer(name)

    def answer(self, name: str) -> Any:
        """The answer to `name`, sent before, within the call deadline (EngineTimeout)."""
        if not self.conn.poll(self.timeout_s):
            self.timed_out(name)
        return self.receive(name)

    def send(self, name: str, *args: Any) -> None:
        """Ask for `name` without waiting for the answer (engines that start together)."""
        if not self.proc.is_alive():
            raise EngineCrashed(f"engine process is gone ({self._exit_text()}) before {name!r}",
                                _tail(self.log_path))
        try:
            self.conn.send((name, args))
        except (BrokenPipeError, ConnectionError, OSError):
            raise EngineCrashed(f"engine process died before {name!r} ({self._exit_text()})",
                                _tail(self.log_path)) from None

    def timed_out(self, name: str) -> None:
        """The call `name` is past its deadline: kill the process, raise EngineTimeout."""
        self.kill()
        raise EngineTimeout(f"engine did not answer {name!r} within {self.timeout_s:g} s "
                            "(hung); its process was killed", _tail(self.log_path))

    def receive(self, name: str) -> Any:
        """The answer to `name` (blocks until it comes: poll first for a deadline)."""
        try:
            status, payload = self.conn.recv()
        except (EOFError, ConnectionError, OSError):
            raise EngineCrashed(f"engine process died during {name!r} ({self._exit_text()})",
                                _tail(self.log_path)) from None
        if status == "ok":
            return payload
        type_name, message, tb = payload
        if status == "bad_input":
            raise BadInput(message)
        if status == "unsupported":
            raise Unsupported(message)
        raise RemoteError(type_name, message, tb)

    def _exit_text(self) -> str:
        self.proc.join(5)
        code = self.proc.exitcode
        if code is None:
            return "still running"
        if code < 0:
            return f"killed by signal {signal.Signals(-code).name}"
        return f"exit code {code}"

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(10)
        self.conn.close()

    def shutdown(self) -> None:
        """End the process: EOF on its pipe ends its loop; kill it if it does not."""
        shutdown_all([self])


def shutdown_all(hosts: list[EngineHost]) -> None:
    """End several engine processes together: EOF to each first, then wait for each (a
    vLLM engine process takes seconds to exit; one after another, a run's dozen added up
    to its sum); kill one that has not ended `CLOSE_TIMEOUT_S` after the EOF."""
    for h in hosts:
        if not h.conn.closed:
            h.conn.close()
    deadline = time.monotonic() + CLOSE_TIMEOUT_S
    for h in hosts:
        h.proc.join(max(0.0, deadline - time.monotonic()))
        if h.proc.is_alive():
            h.proc.kill()
            h.proc.join(10)


class RemoteSession:
    """A `Session` whose engine runs in an `EngineHost` (see the module docstring)."""

    def __init__(self, host: EngineHost, target_name: str, log_path: Path, info: dict) -> None:
        """A session whose engine answered "open" with `info` (see PendingOpen)."""
        self.host, self.log_path = host, Path(log_path)
        self.reusable = bool(getattr(get_target(target_name), "reopen_in_process", False))
        self.vocab_size = info["vocab_size"]
        self.step_label = info["step_label"]
        self.phase_labels = info["phase_labels"]
        # what the start added to the kernel-compile caches (harness.run.engines.compile_cache), and
        # the engine process it runs in
        self.compile_cache_writes: dict[str, int] = info["compile_cache_writes"]
        self.pid: int = info["pid"]
        self.python: str = info["python"]        # the interpreter it runs (a side's build)
        # when its process began serving, when "open" arrived and ended (perf_counter), and
        # the session's own account of its start (harness.run.engines.start_phases)
        self.start_clock: dict[str, float] = info.get("start_clock") or {}
        self.start_phases: dict[str, float | None] = info.get("start_phases") or {}
        self.auditing = False

    def _call(self, name: str, *args: Any) -> Any:
        return self.host.call(name, *args)

    # -- the Session interface -----------------------------------------------------------
    def generate(self, prompts, max_tokens, stop, sampling=None, logprobs=None):
        if logprobs is not None:
            return self._call("generate", prompts, max_tokens, stop, sampling, logprobs)
        if sampling is None:
            return self._call("generate", prompts, max_tokens, stop)
        return self._call("generate", prompts, max_tokens, stop, sampling)

    def serve(self, requests):
        return self._call("serve", requests)

    def dispatch_log(self):
        return self._call("dispatch_log")

    def counters(self):
        return self._call("counters")

    def fits(self, prompt, max_tokens):
        return self._call("fits", prompt, max_tokens)

    def steps(self):
        return self._call("steps")

    def reset_steps(self):
        return self._call("reset_steps")

    def audits(self):
        return self._call("audits")

    def resolved(self):
        return self._call("resolved")

    def profiled_run(self, prompts: list, batch, device: str):
        """The profiled pass, run where the engine is (the profiler sees only its process)."""
        return self._call("profiled_run", prompts, batch, device)

    def close(self) -> None:
        if self.begin_close() and self.finish_close():
            self.host.shutdown()

    def begin_close(self) -> bool:
        """Ask the engine to close without waiting (engines closing together): whether an
        answer is to come (`finish_close`)."""
        if not self.host.usable():
            return False
        try:
            self.host.send("close")
        except EngineCrashed:
            self.host.kill()
            return False
        return True

    def finish_close(self) -> bool:
        """Read the answer to `begin_close`: whether the host's process is to end now (its
        target hosts one session a process). A host that cannot close cleanly is retired."""
        try:
            self.host.answer("close")
        except (EngineCrashed, EngineTimeout, RemoteError):
            self.host.kill()
            return False
        return not self.reusable


class PendingOpen:
    """An engine asked to open and not yet answered: engines that start together are each
    sent "open" first, then answered in the order they finish (`HostPool.begin_open`)."""

    def __init__(self, host: EngineHost, target_name: str, spec: SideSpec,
                 options: EngineOptions, log_path: Path) -> None:
        self.host, self.target_name, self.log_path = host, target_name, Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        host.log_path = self.log_path
        host.send("open", target_name, spec, options, str(self.log_path))

    @property
    def conn(self):
        return self.host.conn

    def result(self) -> RemoteSession:
        """The session, once its engine answered (blocks until then)."""
        return RemoteSession(self.host, self.target_name, self.log_path,
                             self.host.receive("open"))


class HostPool:
    """The engine processes of one run: one per side, reused across workloads while healthy
    (a spawn costs seconds of imports; a run opens dozens of sessions)."""

    def __init__(self, timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self.hosts: dict[str, EngineHost] = {}
        self.preloaders = Preloaders()

    def preloader(self, spec: SideSpec, log_dir: Path) -> Preloader | None:
        """The preloading process `spec`'s engine processes are forked from (started now if
        there is none: wait for it with `Preloader.wait_ready`); None where engines are
        spawned (`preload.start_method`: on the CPU, or `MRBENCH_ENGINE_START=spawn`)."""
        if start_method(spec.device) != "preload":
            return None
        build = resolve(spec.build) if spec.build else None
        return self.preloaders.get(build, get_target(spec.target), spec, log_dir)

    def begin_open(self, key: str, target_name: str, spec: SideSpec, options: EngineOptions,
                   log_path: Path, preloader: Preloader | None = None) -> PendingOpen:
        """Send "open" to `key`'s engine process (a new one unless a healthy one of the same
        build can host it: forked by `preloader` where it is ready, else spawned) and
        return without waiting."""
        host = self.hosts.get(key)
        build = resolve(spec.build) if spec.build else None
        if host is None or not host.usable() or host.build != build:
            if host is not None:
                host.shutdown()
            host = self.hosts[key] = EngineHost(self.timeout_s, build, preloader)
        try:
            return PendingOpen(host, target_name, spec, options, log_path)
        except BaseException:
            self.failed_open(key, target_name)
            raise

    def finish_open(self, key: str, pending: PendingOpen) -> RemoteSession:
        try:
            return pending.result()
        except BaseException:
            self.failed_open(key, pending.target_name)
            raise

    def failed_open(self, key: str, target_name: str) -> None:
        """After a failed open: a target that cannot reopen in its process ends it, so that
        the next open of `key` starts a new one."""
        host = self.hosts.get(key)
        if host is not None and not getattr(get_target(target_name), "reopen_in_process",
                                            False):
            host.shutdown()

    def retire(self, *keys: str) -> None:
        """End these keys' engine processes together (their sessions closed first): the
        next `open` of each side starts a new process."""
        shutdown_all([h for h in (self.hosts.pop(k, None) for k in keys) if h is not None])

    def shutdown(self) -> None:
        shutdown_all(list(self.hosts.values()))
        self.hosts = {}
        self.preloaders.stop_all()

    def kill_all(self) -> None:
        """End every engine process at once: after an interrupt a host may be mid-call, and
        its pipe then holds a reply that a polite close would read as its own."""
        for h in self.hosts.values():
            h.kill()
        self.hosts = {}
