"""`mrbench data`: which data files each suite reads, where they were found, where they come
from; `mrbench data fetch`: download the full sets.

The data directory is resolved in one place (`mrbench.contract.paths`: $MRBENCH_DATA_DIR,
../shared/data beside a checkout, the fetch cache, the slices shipped in the package). This
command shows that resolution to a user whose run stopped on a missing or short file.

Downloads use the standard library (`urllib.request`): a handful of plain HTTPS GETs need no
client library. Each file is written to a temporary name, checked (it parses, and holds at
least the rows the package ships), and only then moved into place, with its licence beside
it: a failed or partial download leaves nothing behind.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from mrbench.contract import BadInput
from mrbench.contract.paths import (
    DATA_DIR_ENV,
    DATA_FILES,
    PACKAGED,
    DataFile,
    cache_dir,
    data_dirs,
    data_origin,
)

from ..record.errors import EXIT_PASS, EXIT_RUN_FAILED
from ..record.suite import load_suite, shipped_suites

FETCH_TIMEOUT_S = 60


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`mrbench data` and its subcommand (fetch)."""
    d = sub.add_parser("data", help="the data files each suite reads, where they were found "
                                    "and where they come from; `data fetch` downloads them")
    d.add_argument("--json", action="store_true")
    dsub = d.add_subparsers(dest="data_cmd", parser_class=type(d))
    df = dsub.add_parser("fetch", help="download the full data sets (needs a network)")
    df.add_argument("files", nargs="*", metavar="FILE",
                    help="data files to fetch, as `mrbench data` names them (default: all)")
    df.add_argument("--dest", type=Path,
                    help="folder to write (default $MRBENCH_DATA_DIR, else ~/.cache/mrbench/"
                         "data, where runs look for it)")
    return d


class NotTheFile(Exception):
    """A download that arrived but is not the expected file (a proxy's page, a moved file)."""


def needs() -> dict[str, list[str]]:
    """{data file path: ["suite:entry (limit N)", ...]} for every shipped suite entry that
    names a trace or dataset file (synthetic traces and hf: datasets read no file)."""
    out: dict[str, list[str]] = {f.path: [] for f in DATA_FILES}
    for name in shipped_suites():
        for e in load_suite(name).workloads:
            for key, folder in (("trace", "traces"), ("dataset", "")):
                spec = e.params.get(key)
                if not isinstance(spec, str) or ":" in spec:
                    continue
                rel = f"{folder}/{spec}" if folder and "/" not in spec else spec
                match = next((f.path for f in DATA_FILES if f.path == rel), None)
                if match:
                    limit = e.params.get("limit")
                    out[match].append(f"{name}:{e.id}"
                                      + (f" ({limit} rows)" if limit else ""))
    return out


def count_rows(path: Path) -> int:
    """Data rows of a JSONL file (non-empty lines) or a CSV file (lines after the header)."""
    with path.open("rb") as f:
        n = sum(1 for line in f if line.strip())
    return n - 1 if path.suffix == ".csv" and n else n


def main(a: argparse.Namespace) -> int:
    if a.data_cmd == "fetch":
        return fetch(a)
    origin, root = data_origin()
    readers = needs()                      # every shipped suite loaded once
    rows = []
    for f in DATA_FILES:
        p = root / f.path
        rows.append(dict(file=f.path, what=f.what, source=f.url, licence=f.licence,
                         full_rows=f.full_rows, found=str(p) if p.is_file() else None,
                         rows=count_rows(p) if p.is_file() else None,
                         needed_by=readers[f.path]))
    info = dict(data_dir=str(root), origin=origin,
                tried=[dict(origin=o, path=str(d), exists=d.is_dir()) for o, d in data_dirs()],
                files=rows)
    if a.json:
        print(json.dumps(info, indent=2))
        return EXIT_PASS
    print(f"data directory: {root} ({origin})")
    print("tried in order: " + "; ".join(
        f"{t['origin']} {t['path']}{'' if t['exists'] else ' (absent)'}" for t in info["tried"]))
    for r in rows:
        here = ("missing" if r["found"] is None else
                f"{r['rows']} of {r['full_rows']} rows"
                + (" (the packaged slice)" if origin == "packaged" else ""))
        print(f"\n{r['file']}: {here}\n  {r['what']}; {r['licence']}\n  source: {r['source']}")
        print("  read by: " + (", ".join(r["needed_by"]) or "no shipped suite (--dataset, "
                               "a suite of your own, the lm-eval scorer)"))
    print(f"\nfull sets: `mrbench data fetch` (to ${DATA_DIR_ENV} if set, else {cache_dir()}), "
          f"or set {DATA_DIR_ENV} to a folder that holds them")
    return EXIT_PASS


def fetch(a: argparse.Namespace) -> int:
    """Download the full files (all, or those named) to --dest; one line and exit 3 when the
    network cannot be reached."""
    dest = Path(a.dest or os.environ.get(DATA_DIR_ENV) or cache_dir()).expanduser()
    wanted = [f for f in DATA_FILES if not a.files or f.path in a.files]
    unknown = set(a.files or ()) - {f.path for f in DATA_FILES}
    if unknown:
        raise BadInput(f"unknown data file(s) {', '.join(sorted(unknown))}; known: "
                       f"{', '.join(f.path for f in DATA_FILES)}")
    for f in wanted:
        try:
            n = _download(f, dest)
        except NotTheFile as e:
            print(f"mrbench: error: {f.url} did not give {f.path}: {e}", file=sys.stderr)
            return EXIT_RUN_FAILED
        except OSError as e:             # URLError is an OSError: no route, no DNS, refused
            reason = getattr(e, "reason", e)
            print(f"mrbench: error: cannot download {f.path} from {f.url} ({reason}): no "
                  f"network here? Copy the files into a folder and set {DATA_DIR_ENV}",
                  file=sys.stderr)
            return EXIT_RUN_FAILED
        print(f"{dest / f.path}: {n} rows", flush=True)
    return EXIT_PASS


def _download(f: DataFile, dest: Path) -> int:
    """One file into dest/f.path, checked before it is moved into place; its row count."""
    target = dest / f.path
    made = [d for d in reversed(target.parents) if not d.exists()]   # outermost first
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=target.suffix,
                               dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out, \
                urllib.request.urlopen(f.url, timeout=FETCH_TIMEOUT_S) as resp:
            shutil.copyfileobj(resp, out)
        n = _check(Path(tmp), f)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        for d in reversed(made):          # the folders this call made, now empty again
            d.rmdir()
        raise
    licence = PACKAGED / Path(f.path).parent / f.licence
    if licence.is_file() and not (target.parent / f.licence).exists():
        shutil.copyfile(licence, target.parent / f.licence)
    return n


def _check(path: Path, f: DataFile) -> int:
    """The downloaded file parses as its kind and is not shorter than the packaged slice."""
    n = count_rows(path)
    if path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        json.loads(line)
                    except json.JSONDecodeError:
                        raise NotTheFile(f"line {lineno} is not JSON") from None
    if n < max(1, f.packaged_rows):
        raise NotTheFile(f"{n} rows, fewer than the {f.packaged_rows} the package ships")
    return n
