"""Request-arrival traces to replay against a runner: Mooncake (JSONL), Azure LLM inference
2023 (CSV), or a seeded synthetic Poisson stream.

Why: latency under load depends on when requests arrive, how long prompts and outputs are,
and how much prompt prefix requests share (prefix caching); real traces give all three.
Traces carry lengths, not text, so prompt_tokens() makes deterministic token ids whose
shared prefixes follow the trace's hash_ids (Mooncake: one id per 512-token prompt block,
equal ids at the same positions = shared prefix).

Every malformed input raises BadInput naming the file and line ("trace PATH:LINE: ...").
Requests come back sorted by arrival (stably; files need not be sorted) with the first at
0.0 s. `limit` keeps the first N requests in file order and stops reading there.
"""
from __future__ import annotations

import calendar
import csv
import hashlib
import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from mrbench.contract import DATA_DIR_ENV, BadInput, check_rows, data_dir

MOONCAKE_BLOCK_TOKENS = 512
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
_TAIL_TAG = int.from_bytes(b"tail", "big")   # SeedSequence entropy must be integers
_INT = re.compile(r"\s*[+-]?[0-9]+\s*")
# Azure writes 7 fractional digits (100 ns), more than datetime parses; split them off.
_AZURE_TS = re.compile(r"\s*(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})(?:\.(\d+))?\s*", re.ASCII)
_SYNTH_REQUIRED = ("n", "rate", "input", "output")
_SYNTH_KEYS = (*_SYNTH_REQUIRED, "seed", "prefix", "block")


@dataclass(frozen=True)
class TraceRequest:
    """One request to replay: when it arrives and how big it is."""
    arrival_s: float          # seconds since the first request of the trace (first = 0.0)
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] = ()  # prefix-block ids; empty when nothing is shared


def traces_dir() -> Path:
    """The data directory's traces/ (`mrbench.contract.data_dir`)."""
    return data_dir() / "traces"


# ---- loading ---------------------------------------------------------------------------

def load_mooncake(path: str | Path, limit: int | None = None) -> list[TraceRequest]:
    """Mooncake JSONL: timestamp (ms), input_length, output_length, hash_ids per line."""
    path = Path(path)
    _check_limit(path, limit)
    rows = []
    for lineno, text in _lines(path):
        if not text.strip():
            continue
        rows.append(_mooncake_row(text, f"trace {path}:{lineno}"))
        if limit is not None and len(rows) >= limit:
            break
    check_rows(path, len(rows), limit)
    return _finish(path, rows, units_per_s=1000)


def load_azure(path: str | Path, limit: int | None = None) -> list[TraceRequest]:
    """Azure LLM inference CSV: TIMESTAMP (date-time), ContextTokens, GeneratedTokens."""
    path = Path(path)
    _check_limit(path, limit)
    lines = _lines(path)
    first = next(lines, None)
    if first is None:
        raise BadInput(f"trace {path}: empty file, expected header {','.join(AZURE_COLUMNS)}")
    header = [c.strip() for c in _csv_fields(first[1], f"trace {path}:1")]
    missing = [c for c in AZURE_COLUMNS if c not in header]
    if missing:
        raise BadInput(f"trace {path}:1: header lacks column(s) {', '.join(missing)}")
    cols = [header.index(c) for c in AZURE_COLUMNS]
    rows = []
    for lineno, text in lines:
        if not text.strip():
            continue
        where = f"trace {path}:{lineno}"
        fields = _csv_fields(text, where)
        if len(fields) != len(header):
            raise BadInput(f"{where}: expected {len(header)} fields, got {len(fields)}")
        ts, ctx, gen = (fields[i] for i in cols)
        rows.append((_azure_ns(ts, where), _csv_count(ctx, "ContextTokens", where),
                     _csv_count(gen, "GeneratedTokens", where), ()))
        if limit is not None and len(rows) >= limit:
            break
    check_rows(path, len(rows), limit)
    return _finish(path, rows, units_per_s=10**9)


def load_trace(spec: str, limit: int | None = None) -> list[TraceRequest]:
    """A .jsonl path (Mooncake), a .csv path (Azure), or
    "synthetic:n=200,rate=2.0,input=32-256,output=16-128[,seed=0,prefix=0.0,block=512]".

    A relative path that does not exist is also looked for in traces_dir(), so suites can
    name the bundled traces by file name.
    """
    if spec.startswith("synthetic:"):
        _check_limit(spec, limit)
        return synthetic(**_parse_synthetic(spec))[:limit]
    path = Path(spec).expanduser()
    if not path.exists() and not path.is_absolute():
        if not (traces_dir() / path).exists():
            raise BadInput(f"trace {spec} is neither here nor in {traces_dir()} (the data "
                           f"directory; set {DATA_DIR_ENV}, or see `mrbench data`)")
        path = traces_dir() / path
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return load_mooncake(path, limit)
    if suffix == ".csv":
        return load_azure(path, limit)
    raise BadInput(f"trace spec {spec!r}: expected a .jsonl (Mooncake) or .csv (Azure) path, "
                   "or synthetic:n=N,rate=R,input=LO-HI,output=LO-HI")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) per line; decoded line by line so a bad byte names its line."""
    if not path.exists():
        raise BadInput(f"trace {path} does not exist")
    try:
        with path.open("rb") as f:
            for lineno, raw in enumerate(f, 1):
                try:
                    text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
                except UnicodeDecodeError as e:
                    raise BadInput(f"trace {path}:{lineno}: not UTF-8 (byte {e.start})") from None
                yield lineno, text.rstrip("\r\n")
    except OSError as e:
        raise BadInput(f"trace {path}: cannot read ({e.strerror or e})") from None


def _mooncake_row(text: str, where: str) -> tuple[float, int, int, tuple[int, ...]]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInput(f"{where}: not JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise BadInput(f"{where}: not JSON (nested too deeply)") from None
    if not isinstance(obj, dict):
        raise BadInput(f"{where}: expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in _MOONCAKE_FIELDS if k not in obj]
    if missing:
        raise BadInput(f"{where}: missing field(s) {', '.join(missing)}")
    ts = _finite(obj["timestamp"])
    if ts is None or ts < 0:
        raise BadInput(f"{where}: timestamp must be a finite number >= 0 (ms), "
                       f"got {_show(obj['timestamp'])}")
    hash_ids = obj["hash_ids"]
    if not isinstance(hash_ids, list) or not all(_is_int(h) and h >= 0 for h in hash_ids):
        raise BadInput(f"{where}: hash_ids must be a list of integers >= 0, got {_show(hash_ids)}")
    return (ts, _json_count(obj, "input_length", where), _json_count(obj, "output_length", where),
            tuple(hash_ids))


def _json_count(obj: dict, key: str, where: str) -> int:
    v = obj[key]
    if not _is_int(v) or v < 1:
        raise BadInput(f"{where}: {key} must be an integer >= 1, got {_show(v)}")
    return v


def _csv_fields(text: str, where: str) -> list[str]:
    """One line as CSV fields; parsed alone so a stray quote cannot swallow later lines."""
    try:
        return next(csv.reader([text]), [])
    except csv.Error as e:
        raise BadInput(f"{where}: malformed CSV ({e})") from None


def _csv_count(text: str, column: str, where: str) -> int:
    if not _INT.fullmatch(text):
        raise BadInput(f"{where}: {column} is not an integer: {_show(text)}")
    if int(text) < 1:
        raise BadInput(f"{where}: {column} must be >= 1, got {int(text)}")
    return int(text)


def _azure_ns(text: str, where: str) -> int:
    """Nanoseconds since the epoch (the zone does not matter: only differences are used)."""
    m = _AZURE_TS.fullmatch(text)
    try:
        if m is None:
            raise ValueError
        whole = datetime.fromisoformat(m[1])
    except ValueError:
        raise BadInput(f"{where}: TIMESTAMP {_show(text)} is not a date-time "
                       "like 2023-11-16 18:15:46.6805900") from None
    return calendar.timegm(whole.timetuple()) * 10**9 + int((m[2] or "0")[:9].ljust(9, "0"))


def _finish(path: Path, rows: list, units_per_s: int) -> list[TraceRequest]:
    if not rows:
        raise BadInput(f"trace {path}: no requests")
    rows.sort(key=lambda r: r[0])   # stable: equal timestamps keep file order
    t0 = rows[0][0]
    return [TraceRequest((t - t0) / units_per_s, i, o, h) for t, i, o, h in rows]


def _check_limit(source: object, limit: int | None) -> None:
    if limit is not None and (not _is_int(limit) or limit < 1):
        raise BadInput(f"trace {source}: limit must be an integer >= 1, got {limit!r}")


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _finite(v: object) -> float | None:
    """v as a float when it is a finite JSON number (bool excluded), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _show(v: object) -> str:
    """repr, cut short so one garbage line cannot flood the error message."""
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


# ---- synthetic -------------------------------------------------------------------------

def synthetic(n: int, rate: float, input_len: tuple[int, int], output_len: tuple[int, int],
              seed: int, prefix_share: float = 0.0,
              block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> list[TraceRequest]:
    """n requests with Poisson arrivals at `rate` per second (exponential gaps, first at 0.0)
    and lengths log-uniform on the integers [lo, hi] (short requests common, long ones still
    there, as in real traces). With prefix_share > 0 every request starts with the same
    "system prompt": its first floor(prefix_share * input_len / block_tokens) blocks get the
    ids 0, 1, ... (pass the same block_tokens to prompt_tokens); the rest is unique.
    """
    problem = _synthetic_problem(n, rate, input_len, output_len, seed, prefix_share, block_tokens)
    if problem:
        raise BadInput(f"synthetic trace: {problem}")
    rng = np.random.default_rng(seed)
    arrivals = np.concatenate([[0.0], np.cumsum(rng.exponential(1.0 / rate, n - 1))])
    ins, outs = _log_uniform(rng, *input_len, n), _log_uniform(rng, *output_len, n)
    return [TraceRequest(float(a), int(i), int(o),
                         tuple(range(int(prefix_share * i) // block_tokens)))
            for a, i, o in zip(arrivals, ins, outs)]


def _log_uniform(rng: np.random.Generator, lo: int, hi: int, n: int) -> np.ndarray:
    x = np.exp(rng.uniform(math.log(lo), math.log(hi + 1), n))
    return np.clip(np.floor(x).astype(np.int64), lo, hi)


def _synthetic_problem(n, rate, input_len, output_len, seed, prefix_share,
                       block_tokens) -> str | None:
    """What is wrong with synthetic()'s arguments, named by spec key; None when fine."""
    if not _is_int(n) or n < 1:
        return f"n must be an integer >= 1, got {n!r}"
    if _finite(rate) is None or rate <= 0:
        return f"rate must be a finite number > 0, got {rate!r}"
    for key, rng in (("input", input_len), ("output", output_len)):
        if not (isinstance(rng, (tuple, list)) and len(rng) == 2
                and all(_is_int(x) for x in rng) and 1 <= rng[0] <= rng[1]):
            return f"{key} must be LO-HI with 1 <= LO <= HI, got {rng!r}"
    if not _is_int(seed) or seed < 0:
        return f"seed must be an integer >= 0, got {seed!r}"
    if _finite(prefix_share) is None or not 0 <= prefix_share <= 1:
        return f"prefix must be a number in [0, 1], got {prefix_share!r}"
    if not _is_int(block_tokens) or block_tokens < 1:
        return f"block must be an integer >= 1, got {block_tokens!r}"
    return None


def _parse_synthetic(spec: str) -> dict:
    """synthetic()'s keyword arguments from "synthetic:k=v,..."; BadInput naming the key."""
    def bad(msg: str) -> BadInput:
        return BadInput(f"trace spec {spec!r}: {msg}")

    raw: dict[str, str] = {}
    for item in spec.removeprefix("synthetic:").split(","):
        key, eq, value = (s.strip() for s in item.partition("="))
        if not eq or not key:
            raise bad(f"expected key=value, got {item!r}")
        if key not in _SYNTH_KEYS:
            raise bad(f"unknown key {key!r} (known: {', '.join(_SYNTH_KEYS)})")
        if key in raw:
            raise bad(f"{key} given twice")
        raw[key] = value
    missing = [k for k in _SYNTH_REQUIRED if k not in raw]
    if missing:
        raise bad(f"missing {', '.join(missing)}")

    def convert(key: str, default: str, kind):
        value = raw.get(key, default)
        try:
            return kind(value)
        except ValueError:
            raise bad(f"{key}={value!r} is not {kind.__doc__}") from None

    args = dict(n=convert("n", "", _spec_int), rate=convert("rate", "", _spec_float),
                input_len=convert("input", "", _spec_range),
                output_len=convert("output", "", _spec_range), seed=convert("seed", "0", _spec_int),
                prefix_share=convert("prefix", "0", _spec_float),
                block_tokens=convert("block", str(MOONCAKE_BLOCK_TOKENS), _spec_int))
    problem = _synthetic_problem(**args)
    if problem:
        raise bad(problem)
    return args


def _spec_int(s: str) -> int:
    """an integer"""
    if not _INT.fullmatch(s):
        raise ValueError
    return int(s)


def _spec_float(s: str) -> float:
    """a number"""
    return float(s)


def _spec_range(s: str) -> tuple[int, int]:
    """LO-HI or a single integer"""
    lo, _, hi = s.partition("-")
    return _spec_int(lo), _spec_int(hi or lo)


# ---- shaping and tokens ----------------------------------------------------------------

def shape(reqs: Sequence[TraceRequest], time_scale: float = 1.0,
          max_input_len: int | None = None, max_output_len: int | None = None,
          block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> list[TraceRequest]:
    """Fit a trace to the model and time budget: arrivals times time_scale (0.1 = ten times
    faster), lengths clipped to [1, max], hash_ids cut to the blocks the prompt still covers.
    """
    if _finite(time_scale) is None or time_scale < 0:
        raise BadInput("trace shaping: time_scale must be a finite number >= 0, "
                       f"got {time_scale!r}")
    for key, cap in (("max_input_len", max_input_len), ("max_output_len", max_output_len)):
        if cap is not None and (not _is_int(cap) or cap < 1):
            raise BadInput(f"trace shaping: {key} must be an integer >= 1, got {cap!r}")
    out = []
    for r in reqs:
        inp = max(1, min(r.input_len, max_input_len or r.input_len))
        outp = max(1, min(r.output_len, max_output_len or r.output_len))
        out.append(TraceRequest(r.arrival_s * time_scale, inp, outp,
                                r.hash_ids[:-(-inp // block_tokens)]))
    return out


def prompt_tokens(req: TraceRequest, vocab_size: int, block_tokens: int = MOONCAKE_BLOCK_TOKENS,
                  seed: int = 0, reserved: int = 0) -> list[int]:
    """input_len token ids in [reserved, vocab_size), the same on every machine and run.

    Block i depends only on (seed, hash_ids[i]), so requests sharing a hash_ids prefix share
    that token prefix (a partial last block is the start of the same full block). Tokens
    past the hash_ids blocks come from (seed, "tail", a digest of all the request's fields),
    so requests without hash_ids still differ unless every field is equal.
    """
    if not 0 <= reserved < vocab_size or block_tokens < 1 or seed < 0:
        raise ValueError(f"need 0 <= reserved < vocab_size, block_tokens >= 1, seed >= 0; got "
                         f"{reserved=}, {vocab_size=}, {block_tokens=}, {seed=}")
    n = req.input_len
    out = np.empty(n, dtype=np.int64)
    covered = min(len(req.hash_ids), -(-n // block_tokens))
    for i, hid in enumerate(req.hash_ids[:covered]):
        start = i * block_tokens
        stop = min(start + block_tokens, n)
        block = np.random.default_rng((seed, hid)).integers(reserved, vocab_size, block_tokens)
        out[start:stop] = block[:stop - start]
    start = covered * block_tokens
    if start < n:
        key = hashlib.blake2b(repr((req.arrival_s, req.input_len, req.output_len, req.hash_ids))
                              .encode(), digest_size=8).digest()
        tail_rng = np.random.default_rng((seed, _TAIL_TAG, int.from_bytes(key, "little")))
        out[start:] = tail_rng.integers(reserved, vocab_size, n - start)
    return out.tolist()
