"""The results directory: manifest, tables, summary, report, written atomically.

Everything is first written into a hidden sibling directory, which is renamed to the
requested path only when complete, so a crash never leaves a half-written run behind.
Tables are CSV (pandas) so they open anywhere; output tokens go to tokens.jsonl.
"""
from __future__ import annotations

import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from .errors import BadInput
from .execute import SideResult

ROOT = Path(__file__).resolve().parents[1]
TABLES = ("requests", "itl", "steps", "profile", "audits", "dispatch")


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
    import torch
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
               cpu_count=os.cpu_count(), torch_threads=torch.get_num_threads(),
               cuda=torch.cuda.get_device_name() if torch.cuda.is_available() else None)
    return dict(python=sys.version.split()[0], versions=versions, git_sha=sha, git_dirty=dirty,
                device=dev, argv=sys.argv, created=datetime.now(timezone.utc).isoformat())


def _clean(x: Any) -> Any:
    """JSON-safe: NaN/inf -> None, tuples -> lists."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(_clean(obj), indent=2, default=str) + "\n")


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

    def commit(self, manifest: dict, summary: dict, render: bool = True) -> Path:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.", dir=self.out.parent))
        try:
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
            if render:
                from .report import render_report
                render_report(tmp)
            if self.out.exists():              # an empty directory (check_out allowed it)
                self.out.rmdir()
            os.replace(tmp, self.out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return self.out


def load_side(run_dir: Path, workload: str, side: str) -> SideResult:
    """Rebuild one side of one workload from a results directory (for `mrbench compare`)."""
    res = SideResult()
    for t in TABLES:
        p = run_dir / f"{t}.csv"
        if not p.is_file() or p.stat().st_size <= 1:
            continue
        try:
            df = pd.read_csv(p)
        except pd.errors.EmptyDataError:
            continue
        if df.empty:
            continue
        df = df[(df["workload"] == workload) & (df["side"] == side)]
        df = df.drop(columns=["workload", "side", "runner"])
        df = df.astype(object).where(df.notna(), None)
        setattr(res, t, df.to_dict("records"))
    toks = {}
    tp = run_dir / "tokens.jsonl"
    if tp.is_file():
        for line in tp.read_text().splitlines():
            row = json.loads(line)
            if row["workload"] == workload and row["side"] == side:
                toks[row["req_index"]] = row["token_ids"]
    res.tokens = [toks[i] for i in sorted(toks)]
    return res


def read_run(run_dir: Path) -> tuple[dict, dict]:
    """(manifest, summary) of a results directory, or BadInput naming what is wrong."""
    if not run_dir.is_dir():
        raise BadInput(f"{run_dir} is not a results directory")
    try:
        return (json.loads((run_dir / "manifest.json").read_text()),
                json.loads((run_dir / "summary.json").read_text()))
    except FileNotFoundError as e:
        raise BadInput(f"{run_dir} is not a results directory (no {Path(e.filename).name})") \
            from None
    except json.JSONDecodeError as e:
        raise BadInput(f"{run_dir}: corrupt JSON ({e.msg} at line {e.lineno})") from None
