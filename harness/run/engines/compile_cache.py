"""Did an engine's start compile its kernels, or load them from the on-disk caches?

Why it matters: a process that compiled its kernels is not the process a warm machine runs.
An engine process that compiled its kernels at start, because the cache was cold, spends
more host time between steps for its whole life than the same engine loading them from the
cache (about 10 % on a GPU, enough to move median TPOT to the gpu-quick bar: the figures
are in docs/detection-power.md, "A cold compile cache"). The engine built first is the one
that compiles, so the bias follows build order and cache state, not the runner. On CPU the
same shows in the step (research/cold_compile_probe.py) and goes away when the compile runs
in a worker thread: the compiler's allocations leave the main thread's malloc arena slower.

So the harness looks at the caches an engine start can write to, before and after it
starts: a start that added files compiled something. `engine_bank.EngineBank` then ends
that engine's process and starts the engine again in a new one (on CUDA, by default), so
both sides are measured in processes that loaded every kernel from the cache; every result
records what each start wrote.

Counting files, rather than asking each compiler, covers every engine with one rule: the
bundled runner's Triton kernels, and vLLM's torch.compile artefacts, Inductor's kernels and
their Triton builds. A directory that does not exist counts zero. The paths follow each
tool's own rule: its environment variable, else its default.
"""
from __future__ import annotations

import getpass
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):       # no passwd entry (a container's uid)
        return str(os.getuid())


def cache_dirs() -> dict[str, Path]:
    """The kernel-compile caches of this process's environment, by name."""
    env = os.environ.get
    home = Path(env("TRITON_HOME") or Path.home())
    xdg = Path(env("XDG_CACHE_HOME") or Path.home() / ".cache")
    return {
        # Triton (the bundled runner's kernels): TRITON_CACHE_DIR, else ~/.triton/cache
        "triton": Path(env("TRITON_CACHE_DIR") or home / ".triton" / "cache"),
        # Inductor (torch.compile; vLLM), which keeps its Triton builds beneath it too
        "inductor": Path(env("TORCHINDUCTOR_CACHE_DIR")
                         or Path(tempfile.gettempdir()) / f"torchinductor_{_user()}"),
        # vLLM's compile cache (its graphs and AOT artefacts)
        "vllm": Path(env("VLLM_CACHE_ROOT") or xdg / "vllm"),
    }


def file_counts(dirs: dict[str, Path] | None = None) -> dict[str, int]:
    """Files under each cache directory now (0 for one that does not exist)."""
    counts = {}
    for name, root in (dirs or cache_dirs()).items():
        n = 0
        for _, _, files in os.walk(root):
            n += len(files)
        counts[name] = n
    return counts


def new_files(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The caches that gained files between two counts, with how many ({} = none)."""
    return {k: after[k] - before.get(k, 0) for k in after if after[k] > before.get(k, 0)}


def counting_writes(start: Callable[[], T]) -> tuple[T, dict[str, int]]:
    """Run `start` (an engine's start) and say which caches it added files to."""
    dirs = cache_dirs()
    before = file_counts(dirs)
    out = start()
    return out, new_files(before, file_counts(dirs))


def describe(writes: dict[str, int]) -> str:
    """"12 files in the triton cache, 1 file in the vllm cache" / "nothing", for a
    progress line or a report."""
    if not writes:
        return "nothing"
    return ", ".join(f"{n} file{'s' * (n != 1)} in the {k} cache"
                     for k, n in sorted(writes.items()))


def describe_start(start: Any) -> str:
    """A recorded engine start (`engine_start` in a manifest) for people: whether the
    measured engine compiled or loaded its kernels, and whether it replaced a start that
    compiled; "?" for a run recorded before engine starts were."""
    if not isinstance(start, dict):
        return "?"
    writes = start.get("compile_cache_writes") or {}
    now = f"compiled ({describe(writes)})" if writes else "loaded from the caches"
    first = start.get("rebuilt_after")
    if isinstance(first, dict):
        return (f"{now}, in a new process after a start that compiled "
                f"({describe(first.get('compile_cache_writes') or {})})")
    return now
