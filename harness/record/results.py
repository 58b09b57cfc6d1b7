"""The results directory: manifest, tables and summary, written atomically, and read back.

Everything is first written into a hidden sibling directory, which is renamed to the
requested path only when complete, so a crash never leaves a half-written run behind.
Tables are CSV (pandas) so they open anywhere; output tokens go to tokens.jsonl.

Storage does not render: `report.html` is written by the command that made the run, from
the run's final directory, after `RunWriter.commit`.

It writes the run record's models (run_record.Manifest, run_record.RunSummary) and nothing
else, and it is the one reader of a results directory (`read_record`, `read_manifest`,
`read_summary`, `read_table`, `load_side`), so compare, report and history read a run the
same way. The manifest carries `results_format`; a reader refuses a newer format than
`RESULTS_FORMAT` with one line, and a manifest without the field is format 1. Format 2
added each check's `delta_kind` and `bar`; a format-1 run reads with them UNKNOWN / None.
Format 3 names every figure `vllm bench serve` also reports by vLLM's name (p99_e2el_ms,
mean_e2el_ms, total_output_tokens, ...: record/metrics.py); an older run's checks and
figures read under those names (run_record's validators). Format 4 does the same for the
spec-decode figures (spec_decode_*, the acceptance rate in percent; an older run's
num_drafts, acceptance_rate, ... read so converted) and records in the manifest the
percentiles of the summary's pNN_ figures, which a suite or --percentiles now chooses.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import asdict
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from pydantic import BaseModel, ValidationError

from mrbench.contract import BadInput, SideResult
from mrbench.contract.paths import data_origin

from ..measure import canary
from ..measure.affinity import current_affinity
from .atomic_dir import filled_in_place
from .errors import ResultsNotWritten
from .run_record import Manifest, RunSummary, RunVerdict, json_safe

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("requests", "itl", "steps", "profile", "audits", "dispatch")
RESULTS_FORMAT = 4    # the layout of a results directory; bump it when a reader must change
TEXT_COLUMNS = ("workload", "side")    # read as text: a workload named "1" stays "1"


def default_out(suite: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{stamp}-{suite}"


def check_out(out: Path) -> None:
    """Refuse an --out we could not fill, before running anything."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"--out {out} already exists and is not an empty directory")
    parent = out.parent if str(out.parent) else Path(".")
    probe = parent
    while not probe.exists():
        probe = probe.parent
    try:                                   # really try: os.access says yes to root on /proc
        if not probe.is_dir():
            raise NotADirectoryError(probe)
        tempfile.TemporaryDirectory(dir=probe).cleanup()
    except OSError:
        raise BadInput(f"--out {out} is not writable ({probe} is not a writable directory)") \
            from None


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def environment() -> dict[str, Any]:
    versions = {}
    for pkg in ("mrbench", "torch", "transformers", "numpy", "pandas", "scipy", "vllm"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    if os.environ.get("MRBENCH_GIT_SHA"):
        # a copy of the tree whose .git is not its source's (a GPU machine's copy of a
        # checkout): the sha the copy was made from, as its sender says
        sha, dirty = os.environ["MRBENCH_GIT_SHA"], None
    else:
        sha = _git("rev-parse", "HEAD")
        dirty = bool(_git("status", "--porcelain", "--untracked-files=no")) if sha else None
    dev = dict(platform=platform.platform(), processor=platform.processor() or platform.machine(),
               cpu_count=os.cpu_count(), cpu_affinity=current_affinity(),
               torch_threads=torch.get_num_threads(),
               cuda=torch.cuda.get_device_name() if torch.cuda.is_available() else None)
    watch = canary.current()
    if watch is not None:
        dev["canary"] = asdict(watch.info)
    origin, folder = data_origin()          # full sets, or the package's slices
    return dict(python=sys.version.split()[0], versions=versions, git_sha=sha, git_dirty=dirty,
                device=dev, argv=sys.argv, created=datetime.now(timezone.utc).isoformat(),
                data=dict(origin=origin, dir=str(folder)))


def write_json(path: Path, obj: Any) -> None:
    """`obj` (a dict, or a run record's model) as indented JSON, NaN written as null."""
    if isinstance(obj, BaseModel):
        obj = obj.model_dump()
    path.write_text(json.dumps(json_safe(obj), indent=2, default=str) + "\n")


class RunWriter:
    """Collects side results, then writes the whole directory in one rename."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.rows: dict[str, list[dict]] = {t: [] for t in TABLES}
        self.tokens: list[dict] = []
        self.files: dict[str, str] = {}

    def add_file(self, rel: str, text: str) -> None:
        """An extra file of the run (e.g. an engine's log), written with the rest."""
        self.files[rel] = text

    def add_side(self, workload: str, side: str, res: SideResult) -> None:
        runner = res.resolved.get("runner")
        for t in TABLES:
            self.rows[t] += [{"workload": workload, "side": side, "runner": runner, **r}
                             for r in getattr(res, t)]
        self.tokens += [dict(workload=workload, side=side, req_index=i, token_ids=t)
                        for i, t in enumerate(res.tokens)]

    def commit(self, manifest: Manifest, summary: RunSummary) -> Path:
        """Write the run into a hidden sibling, then rename it to `out`; returns `out`.
        The manifest is stamped with `results_format` (the caller's model is left as it
        is). Nothing is rendered here. A write the OS refuses (ENOSPC, EDQUOT, EROFS)
        removes the hidden sibling and raises ResultsNotWritten: `out` is left as it was."""
        manifest = manifest.model_copy(update={"results_format": RESULTS_FORMAT})
        try:
            with filled_in_place(self.out) as tmp:
                for t, rows in self.rows.items():
                    pd.DataFrame(rows).to_csv(tmp / f"{t}.csv", index=False)
                with (tmp / "tokens.jsonl").open("w") as f:
                    for row in self.tokens:
                        f.write(json.dumps(row) + "\n")
                for rel, text in self.files.items():
                    (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                    (tmp / rel).write_text(text, encoding="utf-8")
                write_json(tmp / "manifest.json", manifest)
                write_json(tmp / "summary.json", summary)
        except OSError as e:                # a full disk, a quota: one line, not a traceback
            raise ResultsNotWritten(self.out, e) from None
        return self.out


def check_format(manifest: dict, run_dir: Path) -> None:
    """Refuse, in one line, a run written in a newer results format than this mrbench
    reads. A manifest without `results_format` is format 1 (runs older than the field)."""
    fmt = manifest.get("results_format", 1)
    if isinstance(fmt, bool) or not isinstance(fmt, int) or fmt < 1:
        raise BadInput(f"{run_dir}: results format {fmt!r} is not a format version")
    if fmt > RESULTS_FORMAT:
        raise BadInput(f"{run_dir}: results format {fmt} is newer than this mrbench reads "
                       f"({RESULTS_FORMAT}); upgrade mrbench")


def _read_json(path: Path, run_dir: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"{run_dir} is not a results directory (no {path.name})") from None
    except json.JSONDecodeError as e:
        raise BadInput(f"{run_dir}: corrupt JSON in {path.name} ({e.msg} at line "
                       f"{e.lineno})") from None


def validated(model: type[BaseModel], data: Any, run_dir: Path, name: str,
              what: str | None = None) -> Any:
    """`data` as `model`, or BadInput naming the first field that does not fit; `what` is
    what the file should be ("a fault matrix"; default: a run's summary or manifest)."""
    if not isinstance(data, dict):
        raise BadInput(f"{run_dir}: {name} is not a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(map(str, err["loc"])) or "top level"
        what = what or f"a run's {name.split('.')[0]}"
        raise BadInput(f"{run_dir}: {name} is not {what} ({where}: {err['msg']})") from None


def read_manifest(run_dir: Path) -> Manifest:
    """The manifest of a results directory, its format checked; BadInput naming what is
    wrong (not a directory, no manifest, corrupt JSON, a newer format, a field that does
    not fit)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise BadInput(f"{run_dir} is not a results directory")
    manifest = _read_json(run_dir / "manifest.json", run_dir)
    if not isinstance(manifest, dict):
        raise BadInput(f"{run_dir}: manifest.json is not a JSON object")
    check_format(manifest, run_dir)
    return validated(Manifest, manifest, run_dir, "manifest.json")


def _summary_of(run_dir: Path) -> RunSummary:
    return validated(RunSummary, _read_json(run_dir / "summary.json", run_dir), run_dir,
                      "summary.json")


def read_summary(run_dir: Path) -> RunSummary:
    """The summary of a results directory; BadInput naming what is wrong. A manifest beside
    it is format-checked (a newer format is refused); one that is absent is left to
    `read_manifest` (a campaign's pieces are read back by their summaries alone)."""
    run_dir = Path(run_dir)
    _check_dir_format(run_dir)
    return _summary_of(run_dir)


def read_record(run_dir: Path) -> tuple[Manifest, RunSummary]:
    """(manifest, summary) of a results directory, or BadInput naming what is wrong."""
    return read_manifest(run_dir), _summary_of(Path(run_dir))


def read_run(run_dir: Path) -> tuple[dict, dict]:
    """`read_record` as the plain dicts its JSON files hold (validated and filled in by the
    models: a format-1 check has `delta_kind` "unknown"), for a reader that keeps runs as
    dicts (the history)."""
    manifest, summary = read_record(run_dir)
    return manifest.to_json_dict(), summary.to_json_dict()


def read_campaign(camp_dir: Path, filename: str) -> dict:
    """A campaign's result (faults.json, calibration.json or power.json) as parsed JSON, its
    format checked; BadInput naming what is wrong (no such file, corrupt JSON, not an
    object, a newer format). A result without `results_format` is format 1 (written before
    the field). Readers take the typed record from campaign_record.read_result, which
    validates this."""
    camp_dir = Path(camp_dir)
    res = _read_json(camp_dir / filename, camp_dir)
    if not isinstance(res, dict):
        raise BadInput(f"{camp_dir}: {filename} is not a JSON object")
    check_format(res, camp_dir)
    return res


def salvage_summary(data: Any) -> tuple[RunSummary, str | None]:
    """summary.json's parsed JSON as far as it reads, for the report (which renders what
    it can of a damaged run rather than nothing): an item of a list that does not fit the
    model is left out, another field that does not fit falls back to its default (the
    verdict to "error"), and the first such problem is said. Not a JSON object: an empty
    summary in error."""
    if not isinstance(data, dict):
        return RunSummary(verdict=RunVerdict.ERROR, checks=[]), "not a JSON object"
    data, said = dict(data), None
    while True:          # each turn drops a field or an item, so this ends
        try:
            return RunSummary.model_validate(data), said
        except ValidationError as e:
            err = e.errors()[0]
            loc = err["loc"]
            said = said or f"{'.'.join(map(str, loc))}: {err['msg']} (left out)"
            field = loc[0]
            if len(loc) > 1 and isinstance(loc[1], int) and isinstance(data.get(field), list):
                data[field] = [x for i, x in enumerate(data[field]) if i != loc[1]]
            elif field in ("verdict", "checks"):
                data[field] = RunVerdict.ERROR if field == "verdict" else []
            else:
                data.pop(field, None)


def salvage_manifest(data: Any) -> Manifest | None:
    """manifest.json's parsed JSON as far as it reads (a top-level field that does not fit
    the model is left out), for the report; None when it is not a JSON object."""
    if not isinstance(data, dict):
        return None
    data = dict(data)
    while True:
        try:
            return Manifest.model_validate(data)
        except ValidationError as e:
            loc = e.errors()[0]["loc"]
            if not loc or loc[0] not in data:
                return Manifest()
            data.pop(loc[0])


class UnreadableTable(BadInput):
    """A table file that is there but does not parse (a report skips it; compare stops)."""


def _check_dir_format(run_dir: Path) -> None:
    """The format check for a reader of tables: a manifest that is absent or corrupt is
    left to whoever reads it (read_run names it); only a newer format stops here."""
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(manifest, dict):
        check_format(manifest, run_dir)


def read_table(run_dir: Path, name: str) -> pd.DataFrame | None:
    """One table of a results directory (`requests`, `itl`, `steps`, ...), or None when it
    is absent or has no rows. `workload` and `side` are read as text (a workload named "1"
    is "1", as summary.json says), column names and those values stripped. A newer results
    format raises BadInput; a file that does not parse raises UnreadableTable."""
    run_dir = Path(run_dir)
    _check_dir_format(run_dir)
    path = run_dir / f"{name}.csv"
    if not path.is_file():
        return None
    try:
        df = pd.read_csv(path, dtype={c: str for c in TEXT_COLUMNS})
    except pd.errors.EmptyDataError:      # an empty table (RunWriter writes one as "\n")
        return None
    except (pd.errors.ParserError, OSError, UnicodeDecodeError, ValueError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UnreadableTable(f"{path}: unreadable table ({first})") from None
    df.columns = [str(c).strip() for c in df.columns]
    for col in TEXT_COLUMNS:
        if col in df.columns:
            df[col] = df[col].where(df[col].isna(), df[col].astype(str).str.strip())
    if df.empty:
        return None
    return df


def load_side(run_dir: Path, workload: str, side: str) -> SideResult:
    """Rebuild one side of one workload from a results directory (for `mrbench compare`)."""
    run_dir = Path(run_dir)
    read_manifest(run_dir)
    res = SideResult()
    for t in TABLES:
        df = read_table(run_dir, t)
        if df is None:
            continue
        df = df[(df["workload"] == str(workload)) & (df["side"] == side)]
        df = df.drop(columns=["workload", "side", "runner"], errors="ignore")
        df = df.astype(object).where(df.notna(), None)
        setattr(res, t, df.to_dict("records"))
    toks = {}
    tp = run_dir / "tokens.jsonl"
    if tp.is_file():
        for line in tp.read_text().splitlines():
            row = json.loads(line)
            if str(row["workload"]) == str(workload) and row["side"] == side:
                toks[row["req_index"]] = row["token_ids"]
    res.tokens = [toks[i] for i in sorted(toks)]
    return res
