"""Result history in SQLite: every run's metrics, keyed by git sha, date, target, suite,
device and model, so a nightly job remembers which night a metric moved.

One row per run (`runs`) and one per (run, workload, side, metric) value (`metrics`).
Runs are comparable when target, suite, device, model, baseline and candidate runners
match; a trend is one comparable group's values in date order. The database is only
written by `add`, in one transaction, after every run directory was read and checked; a
file that is not this schema is refused, untouched.
"""
from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from mrbench.contract import BadInput

from .metrics import LATENCY
from .results import read_run
from .run_record import RunVerdict, Verdict

SCHEMA_VERSION = "1"
DEFAULT_DB = Path("results") / "history.sqlite"
CHECK_METRICS = ("syncs_per_step", "ops_per_step", "allocs_per_step", "accuracy_strict",
                 "token_agreement", "mean_acceptance_length", "state_audit_violations",
                 "unwarmed_dispatch")
JUDGED = "judged:"      # prefix: 1 if the run's own check judged that P99, 0 if `info`
RATIO = "ratio:"        # prefix: a judged latency check's relative change, candidate/baseline
GROUP_KEYS = ("target", "suite", "device", "model", "baseline", "candidate")
_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY, run_dir TEXT NOT NULL UNIQUE, git_sha TEXT, created TEXT NOT NULL,
    target TEXT, suite TEXT, device TEXT, model TEXT, baseline TEXT, candidate TEXT,
    faults TEXT, verdict TEXT);
CREATE TABLE metrics (
    run_id INTEGER NOT NULL REFERENCES runs(id), workload TEXT NOT NULL, side TEXT NOT NULL,
    metric TEXT NOT NULL, value REAL, PRIMARY KEY (run_id, workload, side, metric));
"""


def _check_schema(db: Path) -> None:
    """Refuse a file that is not an mrbench history (read-only: nothing is written)."""
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            row = con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    except sqlite3.DatabaseError as e:
        raise BadInput(f"history database {db} is not an mrbench history ({e})") from None
    if row is None or row[0] != SCHEMA_VERSION:
        raise BadInput(f"history database {db} has schema {row and row[0]!r}; "
                       f"this mrbench reads {SCHEMA_VERSION!r}")


def open_existing(db: Path) -> sqlite3.Connection:
    if not db.is_file():
        raise BadInput(f"history database {db} does not exist (mrbench history add RUN ... "
                       "creates it)")
    _check_schema(db)
    return sqlite3.connect(db)


def run_record(run_dir: Path) -> tuple[dict, list[tuple[str, str, str, float]]]:
    """The run's key fields and its numeric metric values, from manifest and summary."""
    manifest, summary = read_run(run_dir)
    if "metrics" not in summary or "checks" not in summary:
        raise BadInput(f"{run_dir}: summary.json is not a run's summary (a campaign? add "
                       "its run directories)")
    return record_of(manifest, summary, run_dir)


def record_of(manifest: dict, summary: dict, run_dir: Path
              ) -> tuple[dict, list[tuple[str, str, str, float]]]:
    """run_record from a run's manifest and summary dicts (also before they are written)."""
    res = manifest.get("resolved") or {}
    first = next(iter(res.values()), {})
    cand = first.get("candidate") or {}
    model = cand.get("model")
    dev = cand.get("device") or (manifest.get("sides") or {}).get("candidate", {}).get("device")
    run = dict(run_dir=str(run_dir.resolve()), git_sha=manifest.get("git_sha"),
               created=manifest.get("created") or "", target=summary.get("target"),
               suite=summary.get("suite"), device=dev, model=model,
               baseline=summary.get("baseline"), candidate=summary.get("candidate"),
               faults=json.dumps(summary.get("candidate_faults") or []),
               verdict=summary.get("verdict"))
    values: dict[tuple[str, str, str], float] = {}
    for wl, sides in (summary.get("metrics") or {}).items():
        for side, m in sides.items():
            for k, v in m.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    values[(wl, side, k)] = float(v)
    for c in summary["checks"]:
        if c["metric"] in LATENCY:    # did the run itself judge this latency?
            judged = c["verdict"] in (Verdict.PASS, Verdict.REGRESSION)
            values[(c["workload"], "candidate", f"{JUDGED}{c['metric']}")] = float(judged)
            if judged and isinstance(c.get("delta"), (int, float)):
                # the run's candidate/baseline estimate, which later runs are judged against
                values[(c["workload"], "candidate", f"{RATIO}{c['metric']}")] = \
                    float(c["delta"])
        if c["metric"] in CHECK_METRICS:
            for side in ("baseline", "candidate"):
                if isinstance(c.get(side), (int, float)):
                    values[(c["workload"], side, c["metric"])] = float(c[side])
    return run, [(w, s, k, v) for (w, s, k), v in values.items()]


def add(db: Path, run_dirs: list[Path]) -> int:
    """Append runs (all or none); a run already in the history is skipped. Returns added."""
    records = [run_record(Path(r)) for r in run_dirs]          # all read before any write
    if db.exists():
        _check_schema(db)
    elif not db.parent.is_dir():
        raise BadInput(f"history database {db}: directory {db.parent} does not exist")
    new = not db.exists()
    con = sqlite3.connect(db)
    try:
        with con:                                              # one transaction
            if new:
                con.executescript(_SCHEMA)
                con.execute("INSERT INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
            added = 0
            for run, values in records:
                if con.execute("SELECT 1 FROM runs WHERE run_dir = ?",
                               (run["run_dir"],)).fetchone():
                    continue
                cur = con.execute(f"INSERT INTO runs ({', '.join(run)}) VALUES "
                                  f"({', '.join('?' * len(run))})", list(run.values()))
                con.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?, ?)",
                                [(cur.lastrowid, *v) for v in values])
                added += 1
    finally:
        con.close()
    return added


def runs(db: Path) -> list[dict[str, Any]]:
    with closing(open_existing(db)) as con:
        con.row_factory = sqlite3.Row
        return [dict(r) for r in con.execute("SELECT * FROM runs ORDER BY created, id")]


def series(db: Path) -> dict[tuple, dict[tuple[str, str, str], list[tuple[dict, float]]]]:
    """{group key: {(workload, side, metric): [(run, value), ...] in date order}}."""
    with closing(open_existing(db)) as con:
        con.row_factory = sqlite3.Row
        rows = con.execute("SELECT r.*, m.workload, m.side, m.metric, m.value FROM metrics m "
                           "JOIN runs r ON r.id = m.run_id ORDER BY r.created, r.id").fetchall()
    out: dict[tuple, dict] = {}
    for r in rows:
        d = dict(r)
        key = tuple(d[k] for k in GROUP_KEYS)
        run = {k: d[k] for k in ("id", "run_dir", "git_sha", "created", "verdict", "faults")}
        out.setdefault(key, {}).setdefault((d["workload"], d["side"], d["metric"]), []).append(
            (run, d["value"]))
    return out


def last_pass(db: Path, like: dict) -> str | None:
    """The newest passing run comparable with `like` (a run record), or None."""
    with closing(open_existing(db)) as con:
        where = " AND ".join(f"{k} IS ?" for k in GROUP_KEYS)
        row = con.execute(f"SELECT run_dir FROM runs WHERE verdict = ? AND {where} "
                          "AND run_dir != ? ORDER BY created DESC, id DESC LIMIT 1",
                          [RunVerdict.PASS] + [like.get(k) for k in GROUP_KEYS]
                          + [like.get("run_dir")]).fetchone()
    return row[0] if row else None


def earlier_ratios(db: Path, like: dict, workload: str, metric: str, limit: int = 20
                   ) -> list[tuple[str, float]]:
    """[(run_dir, relative change)] of `metric` on `workload` in the newest `limit` clean
    passing runs comparable with `like` (a run record), oldest first; `like`'s own run left
    out. Runs recorded before ratios were stored have none."""
    with closing(open_existing(db)) as con:
        where = " AND ".join(f"r.{k} IS ?" for k in GROUP_KEYS)
        rows = con.execute(
            f"SELECT r.run_dir, m.value FROM runs r JOIN metrics m ON m.run_id = r.id "
            f"WHERE r.verdict = ? AND r.faults = '[]' AND {where} AND r.run_dir != ? "
            f"AND m.workload = ? AND m.side = 'candidate' AND m.metric = ? "
            f"ORDER BY r.created DESC, r.id DESC LIMIT ?",
            [RunVerdict.PASS] + [like.get(k) for k in GROUP_KEYS] + [like.get("run_dir"), workload,
                                                  f"{RATIO}{metric}", limit]).fetchall()
    return [(d, v) for d, v in reversed(rows)]
