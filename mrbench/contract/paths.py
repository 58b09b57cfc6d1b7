"""Where mrbench finds its data: the one resolver of the data directory, and the data files
it knows (what each is, where it comes from, under which licence).

Datasets and traces are read at run time, never committed whole. In order:
1. `$MRBENCH_DATA_DIR` (CI and the nightly job set it): full sets;
2. `../shared/data` beside a source checkout, as the team's machines are laid out;
3. `~/.cache/mrbench/data` (`$XDG_CACHE_HOME`), where `mrbench data fetch` writes the full
   sets;
4. the slices shipped in the package (`mrbench/data/`): the first rows of each file, with
   its licence, so that `pip install mrbench && mrbench run` works anywhere, offline.
A workload that asks a packaged slice for more rows than it holds stops with one line
(`check_rows`) rather than measure fewer requests than its suite says.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import BadInput

DATA_DIR_ENV = "MRBENCH_DATA_DIR"
CHECKOUT = Path(__file__).resolve().parents[2]
PACKAGED = Path(__file__).resolve().parents[1] / "data"     # mrbench/data, checkout or wheel


@dataclass(frozen=True)
class DataFile:
    """One file a suite may read, relative to the data directory."""

    path: str                 # e.g. "traces/mooncake_conversation_trace.jsonl"
    what: str
    url: str                  # where `mrbench data fetch` downloads the full file
    licence: str              # the licence file beside it (same folder)
    full_rows: int            # rows of the full file
    packaged_rows: int        # rows of the slice in mrbench/data (0: not packaged)


DATA_FILES: tuple[DataFile, ...] = (
    DataFile("gsm8k/test.jsonl", "GSM8K test problems (OpenAI, grade-school-math)",
             "https://raw.githubusercontent.com/openai/grade-school-math/master/"
             "grade_school_math/data/test.jsonl", "LICENSE-MIT", 1319, 256),
    DataFile("traces/mooncake_conversation_trace.jsonl",
             "Mooncake conversation trace (kvcache-ai, FAST'25)",
             "https://raw.githubusercontent.com/kvcache-ai/Mooncake/main/FAST25-release/"
             "traces/conversation_trace.jsonl", "LICENSE-mooncake-Apache-2.0", 12031, 1000),
    DataFile("traces/mooncake_synthetic_trace.jsonl",
             "Mooncake synthetic trace (kvcache-ai, FAST'25)",
             "https://raw.githubusercontent.com/kvcache-ai/Mooncake/main/FAST25-release/"
             "traces/synthetic_trace.jsonl", "LICENSE-mooncake-Apache-2.0", 3993, 0),
    DataFile("traces/azure_llm_2023_conv.csv",
             "Azure LLM inference trace 2023, conversation (Microsoft)",
             "https://raw.githubusercontent.com/Azure/AzurePublicDataset/master/data/"
             "AzureLLMInferenceTrace_conv.csv", "LICENSE-azure-CC-BY-4.0", 19366, 0),
    DataFile("traces/azure_llm_2023_code.csv",
             "Azure LLM inference trace 2023, code (Microsoft)",
             "https://raw.githubusercontent.com/Azure/AzurePublicDataset/master/data/"
             "AzureLLMInferenceTrace_code.csv", "LICENSE-azure-CC-BY-4.0", 8819, 0),
)


def cache_dir() -> Path:
    """Where `mrbench data fetch` writes the full sets by default."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mrbench" / "data"


def data_dirs() -> list[tuple[str, Path]]:
    """(origin, folder) in the order they are tried: the first that exists is the data
    directory. With `$MRBENCH_DATA_DIR` set it is the only one (a wrong path then fails
    loudly instead of falling back to a slice)."""
    if os.environ.get(DATA_DIR_ENV):
        return [(DATA_DIR_ENV, Path(os.environ[DATA_DIR_ENV]))]
    return [("checkout", CHECKOUT.parent / "shared" / "data"), ("cache", cache_dir()),
            ("packaged", PACKAGED)]


def data_origin() -> tuple[str, Path]:
    """(origin, folder) of the data directory in use: "MRBENCH_DATA_DIR", "checkout",
    "cache" or "packaged"."""
    dirs = data_dirs()
    for origin, path in dirs:
        if path.is_dir():
            return origin, path
    return dirs[0]


def data_dir() -> Path:
    """The data directory in use (`data_origin`)."""
    return data_origin()[1]


def packaged_file(path: Path) -> DataFile | None:
    """The registry entry of `path` when it is a packaged slice, else None."""
    try:
        rel = path.resolve().relative_to(PACKAGED.resolve()).as_posix()
    except ValueError:
        return None
    return next((f for f in DATA_FILES if f.path == rel), None)


def check_rows(path: Path, got: int, limit: int | None) -> None:
    """BadInput when `limit` rows were asked of a packaged slice that holds fewer: a suite
    that asks for 1000 requests measures 1000 or says why not."""
    f = packaged_file(path)
    if f is None or limit is None or got >= limit:
        return
    raise BadInput(f"{f.path}: the packaged slice holds {got} rows, {limit} were asked; "
                   f"get the full set with `mrbench data fetch` or point {DATA_DIR_ENV} at it")
