"""What a preloading process runs (harness.run.engines.preload): it imports the engine processes'
code once, so that each engine forked from it starts with its imports done.

Imported by multiprocessing's forkserver as its preload module, and by nothing else. It reads what
to import and where to log from the environment the harness started it with (`LOG_ENV`,
`MODULES_ENV`; the engines forked from it take the harness's own environment back), sends
its output to that log (vLLM logs as it imports; the harness's terminal stays readable) and
ends the log with `READY` and its seconds, which the harness waits for. A module that fails
to import is logged and left to the engine process, which imports it again and reports the
failure where it belongs, in its own start.

Only imports: nothing here compiles, touches a device or starts a thread pool, since every
engine process is a fork of this one.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback

from .preload import LOG_ENV, MAIN_ENV, MODULES_ENV, PATH_ENV, READY, STARTED, UNSAFE, log_to


def _preload() -> None:
    began = time.perf_counter()
    if os.environ.get(LOG_ENV):
        log_to(os.environ[LOG_ENV])
    if os.environ.get(PATH_ENV):
        sys.path[:] = json.loads(os.environ[PATH_ENV])
    print(f"{STARTED}: {sys.executable}, import path {sys.path[:3]}...", flush=True)
    modules = [m for m in os.environ.get(MODULES_ENV, "").split(",") if m]
    if os.environ.get(MAIN_ENV):
        # the harness's main script, as every engine process would run it
        # (multiprocessing's own "__main__" preload misses it on Python 3.11 and 3.12)
        from multiprocessing import process, spawn
        process.current_process()._inheriting = True
        try:
            spawn.import_main_path(os.environ[MAIN_ENV])
            print(f"mrbench preload: ran {os.environ[MAIN_ENV]} as __mp_main__", flush=True)
        except BaseException:            # noqa: BLE001 - each engine process runs it itself
            traceback.print_exc()
        finally:
            del process.current_process()._inheriting
    for name in modules:
        t0 = time.perf_counter()
        try:
            importlib.import_module(name)
            print(f"mrbench preload: imported {name} in {time.perf_counter() - t0:.2f} s",
                  flush=True)
        except BaseException:            # noqa: BLE001 - the engine imports it again itself
            print(f"mrbench preload: {name} did not import; engine processes import it "
                  "themselves:", flush=True)
            traceback.print_exc()
    if _cuda_driver_initialised():
        print(f"{UNSAFE}: an import initialised the CUDA driver, which a forked process "
              "cannot use", flush=True)
    print(f"{READY} in {time.perf_counter() - began:.2f} s (pid {os.getpid()}, "
          f"{len(os.listdir('/proc/self/task')) if os.path.isdir('/proc/self/task') else '?'}"
          " threads)", flush=True)


def _cuda_driver_initialised() -> bool:
    """Whether this process initialised the CUDA driver (cuInit): a process forked from it
    then fails its first CUDA call. torch initialises CUDA lazily and vLLM avoids it at
    import, but any imported library could call it; the driver answers a device count only
    once initialised (CUDA_ERROR_NOT_INITIALIZED before)."""
    import ctypes
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:                      # no NVIDIA driver: nothing to initialise
        return False
    count = ctypes.c_int(0)
    return driver.cuDeviceGetCount(ctypes.byref(count)) == 0


_preload()
