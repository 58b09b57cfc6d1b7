"""Result history in SQLite: every run's metrics, keyed by git sha, date, target, suite,
device and model, and each side's vLLM version and commit, so a nightly job remembers
which night, and which vLLM commit, moved a metric.

One row per run (`runs`) and one per (run, workload, side, metric) value (`metrics`).
Runs are comparable when target, suite, device, model, baseline and candidate runners
match; a trend is one comparable group's values in date order. The vLLM build is not part
of the group: a trend across vLLM commits is what the history is for, and the build is
what a change point is attributed to.

Build identity (schema 2) is four columns of `runs`, `baseline_vllm_version`,
`baseline_vllm_commit`, `candidate_vllm_version`, `candidate_vllm_commit`, not a table of
sides: a run has exactly two sides by design, every reader wants both beside the run's
other keys (`SELECT * FROM runs`, the group filters of `last_pass`), and columns migrate
from schema 1 with `ALTER TABLE ... ADD COLUMN`, which gives the old rows NULL and needs
no copy of the table. NULL means no vLLM was recorded: the bundled runner, an imported
`vllm bench` file, a run made before schema 2, or a release build without a commit.

Metric names (schema 3) are vLLM's where `vllm bench serve` reports the same figure
(record/metrics.py): the migration from schema 2 renames what older mrbench stored
(p99_e2e_ms -> p99_e2el_ms, its `judged:` and `ratio:` rows, output_tokens ->
total_output_tokens), so a trend runs on across the rename under one name. Schema 4 does
the same for the sides' spec-decode figures (num_drafts -> spec_decode_num_drafts, ...;
acceptance_rate, a fraction, -> spec_decode_acceptance_rate in percent); the check
`mean_acceptance_length` keeps its name and rows. Older acceptance_rate_pos_J rows stay as
they are: a run now gives those as one list, which the history (numbers only) leaves out.
Schema 5 adds each side's build folder (`baseline_build`, `candidate_build`: `b-pr` of a
side named `vllm@/builds/b-pr:v2`), which the trend report's build line names: two builds of
one vLLM release and commit differ only there.

Writes: only `add` writes, in one transaction (BEGIN IMMEDIATE ... COMMIT), after every
run directory was read and checked; an older file (schema 1 or 2) is migrated in place
inside that same transaction (a failure leaves it as it was). An `add` killed inside its
transaction leaves SQLite's journal beside the file; the next open rolls it back (a reader
too: `_recover`), so the history holds what it held before, and a first `add` so cut off
leaves an empty file that the next `add` makes anew. Reads never write otherwise: an older
file is read through a migrated in-memory copy. A file that is not an mrbench history, or
whose schema is newer than this mrbench's, is refused, untouched.

Runs are read through `results.read_run`; their manifest and summary are accessed with
`_get` / `_items`, which take plain dicts and typed records (attributes of the same
names) alike.
"""
from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Iterable, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

from mrbench.contract import BadInput

from .metrics import LATENCY, SPEC_RENAMED, current_name
from .results import read_run
from .run_record import RunVerdict, Verdict, judged_across_runs

SCHEMA_VERSION = "5"
DEFAULT_DB = Path("results") / "history.sqlite"
CHECK_METRICS = ("syncs_per_step", "ops_per_step", "allocs_per_step", "accuracy_strict",
                 "token_agreement", "mean_acceptance_length", "state_audit_violations",
                 "unwarmed_dispatch")
JUDGED = "judged:"      # prefix: 1 if the run's own check judged that P99, 0 if `info`
RATIO = "ratio:"        # prefix: a judged latency check's relative change, candidate/baseline
GROUP_KEYS = ("target", "suite", "device", "model", "baseline", "candidate")
SIDES = ("baseline", "candidate")
BUILD_COLUMNS = tuple(f"{side}_vllm_{f}" for side in SIDES for f in ("version", "commit"))
# schema 5: each side's own build by its folder (`b-pr/site`), None for the harness's own
# vLLM or the bundled runner: two builds of one release and commit differ only there
FOLDER_COLUMNS = tuple(f"{side}_build" for side in SIDES)
RUN_FIELDS = ("id", "run_dir", "git_sha", "created", "target", "verdict", "faults",
              *BUILD_COLUMNS, *FOLDER_COLUMNS)  # what a trend's point carries of its run
_SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY, run_dir TEXT NOT NULL UNIQUE, git_sha TEXT, created TEXT NOT NULL,
    target TEXT, suite TEXT, device TEXT, model TEXT, baseline TEXT, candidate TEXT,
    faults TEXT, verdict TEXT,
    {', '.join(f'{c} TEXT' for c in BUILD_COLUMNS + FOLDER_COLUMNS)});
CREATE TABLE metrics (
    run_id INTEGER NOT NULL REFERENCES runs(id), workload TEXT NOT NULL, side TEXT NOT NULL,
    metric TEXT NOT NULL, value REAL, PRIMARY KEY (run_id, workload, side, metric));
"""


def _spec_decode_names() -> list[str]:
    """Schema 4's statements: each side's spec-decode row under vLLM's name, its value in
    vLLM's unit (metrics.SPEC_RENAMED; where a run has both, the row so named is kept).
    The row of the check named like an old figure (mean_acceptance_length, a
    CHECK_METRICS row too) is copied, not moved: the check keeps its name."""
    out = []
    for old, (new, factor) in SPEC_RENAMED.items():
        out.append(f"INSERT OR IGNORE INTO metrics SELECT run_id, workload, side, '{new}', "
                   f"value * {factor} FROM metrics WHERE metric = '{old}'")
        if old not in CHECK_METRICS:
            out.append(f"DELETE FROM metrics WHERE metric = '{old}'")
    return out


# schema version -> (the next version, the statements that reach it). 3: metric names as
# vLLM names them (p99_e2e_ms -> p99_e2el_ms, judged:/ratio: and the summary's figures
# alike; metrics.current_name, which _migrate registers as an SQL function); where a run
# had both names (an older import), the row already so named is kept. 4: the spec-decode
# figures as vLLM names them. 5: each side's build folder (older runs: NULL)
_MIGRATIONS = {"1": ("2", [f"ALTER TABLE runs ADD COLUMN {c} TEXT" for c in BUILD_COLUMNS]),
               "2": ("3", ["UPDATE OR IGNORE metrics SET metric = current_name(metric)",
                           "DELETE FROM metrics WHERE metric != current_name(metric)"]),
               "3": ("4", _spec_decode_names()),
               "4": ("5", [f"ALTER TABLE runs ADD COLUMN {c} TEXT" for c in FOLDER_COLUMNS])}


# ---- manifest and summary, as dicts or typed records ----------------------------------------

def _get(obj: Any, key: str, default: Any = None) -> Any:
    """obj[key] of a mapping, else the attribute `key` of a typed record; None-safe."""
    if obj is None:
        return default
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _items(obj: Any) -> Iterable[tuple[str, Any]]:
    """(key, value) of a mapping or of a typed record's fields."""
    if obj is None:
        return []
    if isinstance(obj, Mapping):
        return obj.items()
    if hasattr(obj, "model_dump"):                          # pydantic
        names = [*type(obj).model_fields, *(getattr(obj, "model_extra", None) or {})]
        return ((k, getattr(obj, k)) for k in names)
    if dataclasses.is_dataclass(obj):
        return ((f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj))
    return vars(obj).items()


def _text(v: Any) -> str | None:
    return None if v is None else str(v)


# ---- schema --------------------------------------------------------------------------------

def _version(con: sqlite3.Connection, db: Path) -> str:
    """The file's schema version; BadInput if it is not an mrbench history this reads."""
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    except sqlite3.DatabaseError as e:
        raise BadInput(f"history database {db} is not an mrbench history ({e})") from None
    if row is None or (row[0] != SCHEMA_VERSION and row[0] not in _MIGRATIONS):
        raise BadInput(f"history database {db} has schema {row and row[0]!r}; "
                       f"this mrbench reads {SCHEMA_VERSION!r} and migrates "
                       f"{', '.join(map(repr, _MIGRATIONS))}")
    return row[0]


def _recover(db: Path) -> None:
    """Roll back what a writer ended mid-transaction left in `db` (`add` killed, or the
    machine lost, while its pages were reaching the file): SQLite does so on the first read
    of a connection that may write, and a read-only one cannot (it fails with "attempt to
    write a readonly database", which read as not a history). Only where a journal lies
    beside the file; a journal of a writer still running is not rolled back (SQLite sees
    its lock), and that read then only reads."""
    if not Path(f"{db}-journal").exists():
        return
    try:
        with closing(sqlite3.connect(db)) as con:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError:
        pass                             # said, read-only, by whoever reads it next


def _is_empty(db: Path) -> bool:
    """Whether `db` holds no table: the first `add` was cut off before its commit (the
    rollback leaves the file empty), so the next `add` makes the history anew."""
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            return con.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
    except sqlite3.DatabaseError:
        return False                     # not a database: _version says so


def _check_schema(db: Path) -> str:
    """The schema version of `db` (read-only: nothing is written, but an interrupted
    writer's transaction is rolled back first, `_recover`); BadInput if unreadable."""
    _recover(db)
    if _is_empty(db):
        raise BadInput(f"history database {db} is empty (its first `history add` was cut off "
                       "before it committed); `mrbench history add RUN ...` makes it")
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            return _version(con, db)
    except sqlite3.DatabaseError as e:
        raise BadInput(f"history database {db} is not an mrbench history ({e})") from None


def _migrate(con: sqlite3.Connection, version: str) -> None:
    """Bring `con` from `version` to SCHEMA_VERSION; the caller holds the transaction."""
    con.create_function("current_name", 1, current_name, deterministic=True)
    while version != SCHEMA_VERSION:
        version, statements = _MIGRATIONS[version]
        for s in statements:
            con.execute(s)
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (SCHEMA_VERSION,))


def open_existing(db: Path) -> sqlite3.Connection:
    """A connection to read `db` in the current schema. An older file is copied into memory
    and migrated there: reading never writes the file (`add` migrates it in place)."""
    if not db.is_file():
        raise BadInput(f"history database {db} does not exist (mrbench history add RUN ... "
                       "creates it)")
    version = _check_schema(db)
    if version == SCHEMA_VERSION:
        return sqlite3.connect(db)
    mem = sqlite3.connect(":memory:")
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as src:
        src.backup(mem)
    with mem:
        _migrate(mem, version)
    return mem


# ---- one run's record ------------------------------------------------------------------------

def run_record(run_dir: Path) -> tuple[dict, list[tuple[str, str, str, float]]]:
    """The run's key fields and its numeric metric values, from manifest and summary."""
    manifest, summary = read_run(run_dir)
    if _get(summary, "metrics") is None or _get(summary, "checks") is None:
        raise BadInput(f"{run_dir}: summary.json is not a run's summary (a campaign? add "
                       "its run directories)")
    return record_of(manifest, summary, run_dir)


def build_identity(manifest: Any) -> dict[str, str | None]:
    """Each side's vLLM version and commit: what its engine reported (the manifest's
    `resolved`, the first workload that says), else the version of the side's own build
    (`builds`); None where the side ran no vLLM (the bundled runner)."""
    resolved = [sides for _, sides in _items(_get(manifest, "resolved"))]
    out: dict[str, str | None] = {}
    for side in SIDES:
        seen = [_get(sides, side) for sides in resolved]
        version = next((v for r in seen if (v := _get(r, "vllm_version"))), None) \
            or _get(_get(_get(manifest, "builds"), side), "vllm_version")
        commit = next((v for r in seen if (v := _get(r, "vllm_commit"))), None)
        out[f"{side}_vllm_version"], out[f"{side}_vllm_commit"] = _text(version), _text(commit)
    return out


BUILD_LINE = "build"      # a side's build in a group key: any build of its runner


def build_folder(label: str | None) -> str | None:
    """The build folder a side's label names (`v2@b-pr` -> `b-pr`), None for a side that
    ran the harness's own vLLM (`v2@harness`) or no build at all."""
    if label is None or "@" not in label:
        return None
    folder = label.split("@", 1)[1]
    return None if folder == "harness" else folder


def group_label(label: str | None) -> str | None:
    """A side's label as the history groups it: `v2@night-42` (a build's folder) is
    `v2@build`. Two builds of one runner are one line of runs whatever the builds' folders
    are called (tonight's against the last good, a new folder each night); which vLLM each
    side ran is in the version and commit columns, which attribute a change."""
    if label is None or "@" not in label:
        return label
    return f"{label.split('@', 1)[0]}@{BUILD_LINE}"


def record_of(manifest: Any, summary: Any, run_dir: Path
              ) -> tuple[dict, list[tuple[str, str, str, float]]]:
    """run_record from a run's manifest and summary (dicts or typed records; also before
    they are written)."""
    first = next(iter(sides for _, sides in _items(_get(manifest, "resolved"))), None)
    cand = _get(first, "candidate")
    model = _get(cand, "model")
    dev = _get(cand, "device") or _get(_get(_get(manifest, "sides"), "candidate"), "device")
    run = dict(run_dir=str(run_dir.resolve()), git_sha=_text(_get(manifest, "git_sha")),
               created=_text(_get(manifest, "created")) or "",
               target=_text(_get(summary, "target")), suite=_text(_get(summary, "suite")),
               device=_text(dev), model=_text(model),
               baseline=group_label(_text(_get(summary, "baseline"))),
               candidate=group_label(_text(_get(summary, "candidate"))),
               faults=json.dumps(list(_get(summary, "candidate_faults") or [])),
               verdict=_text(_get(summary, "verdict")), **build_identity(manifest),
               **{f"{side}_build": build_folder(_text(_get(summary, side))) for side in SIDES})
    values: dict[tuple[str, str, str], float] = {}
    for wl, sides in _items(_get(summary, "metrics")):
        for side, m in _items(sides):
            for k, v in _items(m):
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    values[(wl, side, k)] = float(v)
    for c in _get(summary, "checks") or []:
        wl, metric, verdict = _get(c, "workload"), _get(c, "metric"), _get(c, "verdict")
        if metric in LATENCY:    # did the run itself judge this latency?
            judged = verdict in (Verdict.PASS, Verdict.REGRESSION)
            values[(wl, "candidate", f"{JUDGED}{metric}")] = float(judged)
            delta = _get(c, "delta")
            if (judged or judged_across_runs(verdict, _get(c, "note"))) \
                    and isinstance(delta, (int, float)):
                # the run's candidate/baseline estimate, which later runs are judged against
                values[(wl, "candidate", f"{RATIO}{metric}")] = float(delta)
        if metric in CHECK_METRICS or metric in LATENCY:
            for side in SIDES:
                v = _get(c, side)
                # a gated latency's figure is the summary's, unless the run's percentiles
                # left it out (run --percentiles 50,99.9: no p99_ttft_ms), so that its
                # trend (history report --absolute-latency) has every run
                if isinstance(v, (int, float)) and not isinstance(v, bool) and (
                        metric in CHECK_METRICS or (wl, side, metric) not in values):
                    values[(wl, side, metric)] = float(v)
    return run, [(w, s, k, v) for (w, s, k), v in values.items()]


# ---- writing ---------------------------------------------------------------------------------

def add(db: Path, run_dirs: list[Path]) -> int:
    """Append runs (all or none); a run already in the history is skipped. Returns added.
    A schema-1 history is migrated in the same transaction."""
    records = [run_record(Path(r)) for r in run_dirs]          # all read before any write
    if db.exists():
        _recover(db)
        new = _is_empty(db)                # a first `add` cut off before its commit
        if not new:
            _check_schema(db)
    elif not db.parent.is_dir():
        raise BadInput(f"history database {db}: directory {db.parent} does not exist")
    else:
        new = True
    con = sqlite3.connect(db, isolation_level=None)           # transactions by hand
    ok = False
    try:
        con.execute("BEGIN IMMEDIATE")                         # one transaction, DDL included
        if new:
            for statement in filter(str.strip, _SCHEMA.split(";")):
                con.execute(statement)
            con.execute("INSERT INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
        else:
            version = _version(con, db)          # again, under the lock: a writer may have
            if version != SCHEMA_VERSION:        # migrated it since
                _migrate(con, version)
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
        con.execute("COMMIT")
        ok = True
    finally:
        if not ok and con.in_transaction:
            con.execute("ROLLBACK")
        con.close()
        if not ok and new:
            db.unlink(missing_ok=True)                         # no half-made history
    return added


# ---- reading ---------------------------------------------------------------------------------

def runs(db: Path) -> list[dict[str, Any]]:
    with closing(open_existing(db)) as con:
        con.row_factory = sqlite3.Row
        return [dict(r) for r in con.execute("SELECT * FROM runs ORDER BY created, id")]


def series(db: Path) -> dict[tuple, dict[tuple[str, str, str], list[tuple[dict, float]]]]:
    """{group key: {(workload, side, metric): [(run, value), ...] in date order}}; a value
    that was not a number (NaN is stored as NULL) is no point."""
    with closing(open_existing(db)) as con:
        con.row_factory = sqlite3.Row
        rows = con.execute("SELECT r.*, m.workload, m.side, m.metric, m.value FROM metrics m "
                           "JOIN runs r ON r.id = m.run_id WHERE m.value IS NOT NULL "
                           "ORDER BY r.created, r.id").fetchall()
    out: dict[tuple, dict] = {}
    for r in rows:
        d = dict(r)
        key = tuple(d[k] for k in GROUP_KEYS)
        run = {k: d[k] for k in RUN_FIELDS}
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
