"""Engine processes forked from a process that has already imported their code.

Why: every engine process used to be spawned, so each paid for a fresh interpreter, torch
and its target's imports before its first line of work: tens of seconds of each first start on a GPU
and as much of each rebuild, many processes importing at once (docs/performance.md, "Time to verdict
on the vllm target"); on a 2-core CPU `from vllm import LLM` alone takes 8-9 s a process. Here the
imports are paid once per environment: a preloading process (the standard library's multiprocessing
forkserver, `preloading` its preload module) imports the harness's engine code
and the target's modules, then forks each engine process from itself.

What a forked engine sees must be what a spawned one would have seen:
- its Python environment: one preloading process per build (`harness.run.builds`), started
  with that build's interpreter and import path;
- the harness's environment variables and CPU affinity. Some libraries read them as they are
  imported (OpenMP's thread count, `MRBENCH_TARGET_MODULES`), so a preloading process serves
  only while they are what they were when it started, and is replaced when they change; the
  engine then takes the harness's current variables as its own (`worker._child`);
- nothing compiled, loaded on a device or started as a thread pool in the preloading process:
  it only imports (vLLM itself forks its workers after importing vLLM for the same reason).
  A forked engine is as new a process as a spawned one for the compile caches.

Where it pays back: engines on a GPU are forked from a preloading process, engines on the CPU
are spawned (`start_method`). `MRBENCH_ENGINE_START=preload` or `=spawn` asks for one way
everywhere. A preloading process that does not come up (it died, or did not finish its
imports within the call deadline) is reported, stopped, and its engines are spawned instead.
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing import forkserver, spawn
from pathlib import Path
from typing import Any

from mrbench.contract import BadInput

from ..builds import environ_set
from ..builds import label as build_label

START_ENV = "MRBENCH_ENGINE_START"      # "auto" (the default), "preload" or "spawn"
# what a preloading process reads from its environment (harness.run.engines.preloading), and the
# line that ends its log once its imports are done
LOG_ENV = "MRBENCH_PRELOAD_LOG"
MODULES_ENV = "MRBENCH_PRELOAD_MODULES"
MAIN_ENV = "MRBENCH_PRELOAD_MAIN"
PATH_ENV = "MRBENCH_PRELOAD_PATH"        # its import path, as spawn would give an engine
STARTED = "mrbench preload: started"
FIRST_LINE_S = 60.0                     # a preloading process that has not logged by then
                                        # never imported its module: it is not used
READY = "mrbench preload: ready"
UNSAFE = "mrbench preload: not fork-safe"     # before READY: its engines are spawned
PRELOAD_MODULE = f"{__package__}.preloading"
# set per test by pytest, per command by shells: read by no engine, and no reason to start
# another preloading process
_VOLATILE = frozenset({"PYTEST_CURRENT_TEST", "_", "OLDPWD", "SHLVL", "COLUMNS", "LINES"})


def log_to(path: str) -> None:
    """Point this process's stdout and stderr (the fds, so native code's output too) at
    `path`: an engine's session log, or a preloading process's log."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def start_method(device: str) -> str:
    """How the engine processes of a side on `device` start: "preload" or "spawn"
    (`MRBENCH_ENGINE_START`: "preload", "spawn", or "auto", the default).

    Auto preloads only for engines on a GPU, where each spawned start paid its imports on a
    host with CPUs to spare. On a few CPU cores the preloading process's imports compete
    with the first starts, and a bundled run starts only one process a side (it hosts one
    session after another), before the preloading process is ready: nothing is forked and
    the imports are all cost. The measurements: docs/performance.md, "Preloaded engine
    processes"."""
    method = os.environ.get(START_ENV, "").strip().lower() or "auto"
    if method not in ("auto", "preload", "spawn"):
        raise BadInput(f"{START_ENV}={os.environ[START_ENV]!r}: use auto, preload or spawn")
    if method != "auto":
        return method
    return "spawn" if device == "cpu" else "preload"


def environment_key() -> tuple:
    """What a preloading process must share with the harness to fork its engines."""
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k not in _VOLATILE))
    affinity = (tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity")
                else ())
    return env, affinity


def preload_of(target: Any, side: Any) -> tuple[tuple[str, ...], dict[str, str]]:
    """What a preloading process imports for `side`'s engines, and the environment variables
    it imports them under: the engine process's own code, then what the target says
    (`Target.preload`: the modules every one of its engine processes imports before its
    engine, under the side's engine environment)."""
    modules, env = (target.preload(side) if hasattr(target, "preload") else ((), {}))
    return (f"{__package__}.worker", *modules), dict(env)


@contextmanager
def build_environment(python: str | None, sys_path: tuple[str, ...] | None) -> Iterator[None]:
    """Within: a process started by spawn, or a preloading process started now, runs
    `python` with `sys_path` (spawn reads both as it starts a process; the harness starts
    engines from one thread)."""
    if python is None:
        yield
        return
    saved_path, saved_exe = sys.path[:], spawn.get_executable()
    sys.path[:] = list(sys_path or ())
    spawn.set_executable(python)
    try:
        yield
    finally:
        sys.path[:] = saved_path
        spawn.set_executable(saved_exe)


@contextmanager
def forked_by(server: forkserver.ForkServer) -> Iterator[None]:
    """Within: a forkserver-context process is forked by `server`. multiprocessing keeps one
    forkserver per interpreter and its launcher asks the module's `connect_to_new_process`,
    which is `server`'s own here."""
    saved = forkserver.connect_to_new_process
    forkserver.connect_to_new_process = server.connect_to_new_process
    try:
        yield
    finally:
        forkserver.connect_to_new_process = saved


@dataclass
class Preloader:
    """One preloading process: the build and modules it serves, its log and readiness."""

    label: str                          # the build's short name, "this environment" if none
    modules: tuple[str, ...]
    env: dict[str, str]                 # set for its imports (the side's engine environment)
    log: Path
    env_key: tuple
    server: forkserver.ForkServer = field(default_factory=forkserver.ForkServer)
    began: float = 0.0
    ready_s: float | None = None        # its imports' seconds, once ready
    failure: str | None = None          # why its engines are spawned instead

    def start(self, python: str | None, sys_path: tuple[str, ...] | None) -> None:
        """Start the process (its imports then run in the background)."""
        self.server.set_forkserver_preload([PRELOAD_MODULE])
        self.log.write_text("")
        self.began = time.perf_counter()
        path = list(sys_path) if sys_path is not None else sys.path[:]
        # multiprocessing's forkserver leaves its import path as `python -c` has it (3.11 and
        # 3.12 pass the parent's and ignore it): PYTHONPATH lets it import the preloading
        # module, which then takes the path a spawned engine would have, the build's first
        env = {**self.env, LOG_ENV: str(self.log), MODULES_ENV: ",".join(self.modules),
               MAIN_ENV: _main_path() or "", PATH_ENV: json.dumps(path),
               "PYTHONPATH": os.pathsep.join(x for x in path if x)}
        with environ_set(env), build_environment(python, sys_path):
            self.server.ensure_running()

    def wait_ready(self, timeout_s: float) -> bool:
        """Whether its imports finished within `timeout_s` of its start; a process that died
        or did not finish is stopped and its failure said (`failure`)."""
        while True:
            done = self.poll(timeout_s)
            if done is not None:
                return done
            time.sleep(0.05)

    def poll(self, timeout_s: float) -> bool | None:
        """Ready (True), failed (False: `failure` says why), or still importing (None)."""
        if self.ready_s is not None:
            return True
        if self.failure is not None:
            return False
        tail = self._log_tail()
        waited = time.perf_counter() - self.began
        if READY in tail:
            if UNSAFE in tail:
                why = tail[tail.index(UNSAFE):].splitlines()[0]
                self.failure = f"{why.removeprefix('mrbench preload: ')} (log: {self.log})"
                self.stop(kill=True)
                return False
            self.ready_s = round(waited, 3)
            return True
        pid = self.server._forkserver_pid
        if pid is None or os.waitpid(pid, os.WNOHANG)[0]:
            self.failure = f"its process ended before its imports did (log: {self.log})"
            self.server._forkserver_pid = None
            self.stop()
            return False
        if STARTED not in tail and waited > FIRST_LINE_S:
            self.failure = (f"it did not start its imports within {FIRST_LINE_S:g} s "
                            f"(log: {self.log})")
        elif waited > timeout_s:
            self.failure = f"its imports did not finish within {timeout_s:g} s (log: {self.log})"
        if self.failure is not None:
            self.stop(kill=True)
            return False
        return None

    def _log_tail(self) -> str:
        try:
            with open(self.log, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log) - 8192))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def stop(self, kill: bool = False) -> None:
        """Let the process end: it ends once the harness and every engine forked from it
        have let go of it (multiprocessing's "alive" pipe), so engines still running keep
        it; `kill` ends it now."""
        pid, alive = self.server._forkserver_pid, self.server._forkserver_alive_fd
        if alive is not None:
            os.close(alive)
        if kill and pid is not None:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        self.server._forkserver_pid = self.server._forkserver_alive_fd = None
        if pid is not None:
            _ENDED.append(pid)
        _reap()

    def describe(self) -> dict:
        """The manifest's record of this preloading process."""
        return dict(build=self.label, modules=list(self.modules), env=dict(self.env),
                    log=self.log.name, ready_s=self.ready_s, failure=self.failure)


def _main_path() -> str | None:
    """The harness's main script where every new engine process would run it again (as
    `__mp_main__`; the `mrbench` console script imports the whole CLI, 1-2 s): run once in
    the preloading process, a forked process finds it done. None for `python -m` (spawn
    skips a package's `__main__`) and for an interactive session."""
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__spec__", None) is not None:
        return None
    path = getattr(main, "__file__", None)
    return os.path.abspath(path) if path else None


_ENDED: list[int] = []                  # preloading processes let go of, not yet reaped


def _reap() -> None:
    for pid in list(_ENDED):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _ENDED.remove(pid)


class Preloaders:
    """The preloading processes of one harness process: one per (build, modules), replaced
    when the harness's environment changed since it started (module docstring)."""

    def __init__(self) -> None:
        self.held: dict[tuple, Preloader] = {}
        self.count = 0                          # started so far: each log's number

    def get(self, build: Any, target: Any, side: Any, log_dir: Path) -> Preloader:
        """The preloading process for `side`'s engines of `target` in `build` (None: this
        environment), started if there is none for the harness's current environment."""
        modules, env = preload_of(target, side)
        key = (build, modules, tuple(sorted(env.items())))
        now = environment_key()
        held = self.held.get(key)
        if held is not None and held.env_key != now:
            held.stop()                         # the harness's environment moved on
            held = None
        if held is None:
            label = build_label(build.path) if build is not None else "this environment"
            log_dir.mkdir(parents=True, exist_ok=True)
            log = log_dir / (f"preload-{_safe(label)}-{getattr(target, 'name', 'engine')}-"
                             f"{self.count + 1}.log")
            held = self.held[key] = Preloader(label, modules, env, log, now)
            held.start(build.python if build else None, build.sys_path if build else None)
            self.count += 1
        return held

    def stop_all(self) -> None:
        for p in self.held.values():
            p.stop()
        self.held = {}


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in name)[:60]
