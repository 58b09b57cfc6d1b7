"""vLLM's model-class inspection run in a fork of the engine's process, not a new interpreter.

Why: to resolve a model's architecture, vLLM imports the model's class in a subprocess
(`registry._run_in_subprocess`, `python -m vllm.model_executor.models.registry`), so that the
import cannot initialise CUDA in the engine's process, and keeps the answer in its
`modelinfos` cache. That subprocess imports torch and vLLM again: tens of seconds of every
first engine start on a fresh GPU machine (docs/performance.md, "Time to verdict on the vllm
target"). A
fork of the engine's process has both imported. It runs the same function (import the class,
read its attributes), sends the answer back and exits; the engine's process is left as vLLM
wants it, and vLLM writes the same answer to the same cache. The child must not use CUDA
either (the engine's process may have initialised it): a child that fails or does not answer
in `TIMEOUT_S` is ended and vLLM's own subprocess runs instead, so the start is never worse
off than without this.
"""
from __future__ import annotations

import multiprocessing as mp
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

TIMEOUT_S = 120.0


def _answer(fn: Callable[[], Any], conn) -> None:
    try:
        conn.send(("ok", fn()))
    except BaseException:                # noqa: BLE001 - the parent falls back
        conn.send(("error", traceback.format_exc(limit=8)))


def run_in_fork(fn: Callable[[], Any], timeout_s: float = TIMEOUT_S) -> Any:
    """`fn()` computed in a fork of this process: its answer, or RuntimeError (failed,
    or no answer within `timeout_s`; the child is then killed)."""
    ctx = mp.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    with warnings.catch_warnings():      # Python 3.12 warns on fork with threads running:
        warnings.simplefilter("ignore", DeprecationWarning)    # the child only imports
        child = ctx.Process(target=_answer, args=(fn, send), daemon=True,
                            name="mrbench-model-inspection")
        child.start()
    send.close()
    try:
        if not receive.poll(timeout_s):
            raise RuntimeError(f"no answer within {timeout_s:g} s")
        status, payload = receive.recv()
    except EOFError:
        raise RuntimeError(f"the fork ended without an answer (exit {child.exitcode})") \
            from None
    finally:
        if child.is_alive():
            child.kill()
        child.join(5)
        receive.close()
    if status != "ok":
        raise RuntimeError(payload)
    return payload


@contextmanager
def inspection_in_fork() -> Iterator[None]:
    """Within: vLLM's model-class inspection runs in a fork of this process (module
    docstring); a vLLM without `registry._run_in_subprocess` is left as it is."""
    try:
        from vllm.model_executor.models import registry
    except ImportError:
        yield
        return
    original = getattr(registry, "_run_in_subprocess", None)
    if original is None:
        yield
        return

    def in_fork(fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        try:
            answer = run_in_fork(fn)
        except RuntimeError as e:
            print(f"mrbench: vLLM's model inspection in a fork failed; vLLM's own subprocess "
                  f"runs it: {str(e).strip().splitlines()[-1] if str(e).strip() else e}",
                  file=sys.stderr, flush=True)
            return original(fn)
        print(f"mrbench: vLLM's model inspection ran in a fork of the engine's process in "
              f"{time.perf_counter() - t0:.2f} s", file=sys.stderr, flush=True)
        return answer

    registry._run_in_subprocess = in_fork
    try:
        yield
    finally:
        registry._run_in_subprocess = original
