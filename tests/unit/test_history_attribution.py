"""The history attributes a change: each run keeps both sides' vLLM version and commit,
`history report` names the first bad commit and the last good one, and exits 1 on the
night a change becomes visible (0 otherwise, 2 on bad input). A schema-1 history is read
and migrated, never refused."""
import json
import sqlite3

import pytest
from pydantic import BaseModel
from support.history_runs import commit, write_run

from mrbench.harness.cli import main
from mrbench.harness.record import history

# schema 1, as mrbench wrote it before build identity was stored
V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY, run_dir TEXT NOT NULL UNIQUE, git_sha TEXT, created TEXT NOT NULL,
    target TEXT, suite TEXT, device TEXT, model TEXT, baseline TEXT, candidate TEXT,
    faults TEXT, verdict TEXT);
CREATE TABLE metrics (
    run_id INTEGER NOT NULL REFERENCES runs(id), workload TEXT NOT NULL, side TEXT NOT NULL,
    metric TEXT NOT NULL, value REAL, PRIMARY KEY (run_id, workload, side, metric));
"""


def _run(root, day, **kw):
    return write_run(root, day, **kw)


def _report(db, tmp_path, capsys, *extra):
    capsys.readouterr()
    code = main(["history", "report", "--db", str(db), "--out", str(tmp_path / "h.html"),
                 *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def _history(tmp_path, runs):
    db = tmp_path / "h.sqlite"
    assert history.add(db, runs) == len(runs)
    return db


def test_a_step_in_the_newest_run_exits_1_and_names_its_vllm_commit(tmp_path, capsys):
    runs = [_run(tmp_path, day, ops=100.0 if day < 8 else 104.0) for day in range(1, 9)]
    db = _history(tmp_path, runs)
    code, out, err = _report(db, tmp_path, capsys)
    assert code == 1, (out, err)
    last = out.strip().splitlines()[-1]
    assert last.startswith("history: CHANGE with the newest run: w/ops_per_step")
    assert commit(8)[:10] in last and "0.26.1" in last and "2026-11-08" in last
    assert f"last good: vLLM {commit(7)[:10]}" in last
    html = (tmp_path / "h.html").read_text()
    assert commit(8)[:10] in html and 'id="newest-verdict"' in html
    code, out, _ = _report(db, tmp_path, capsys, "--json")
    res = json.loads(out)
    assert code == 1 and res["exit"] == 1
    [c] = res["newest"]
    assert (c["metric"], c["run_number"], c["candidate_vllm_commit"], c["last_good_vllm_commit"]) \
        == ("ops_per_step", 8, commit(8), commit(7))
    # the next night the change is known: the history no longer fails on it
    history.add(db, [_run(tmp_path, 9, ops=104.0)])
    code, out, _ = _report(db, tmp_path, capsys)
    assert code == 0 and out.strip().splitlines()[-1].startswith("history: no newest run")
    assert f"from run 8 (2026-11-08, vLLM {commit(8)[:10]} (0.26.1)" in out


def test_two_build_nights_are_one_line_whatever_their_build_folders(tmp_path, capsys):
    """The two-build nightly names a new folder each night (tonight's build against the
    last good one); the history groups them as one line, so the night a build changes the
    counts is named by its vLLM commit."""
    runs = [_run(tmp_path, day, ops=100.0 if day < 8 else 104.0,
                 candidate=f"v2@night-{day:02d}", baseline=f"v2@night-{day - 1:02d}")
            for day in range(1, 9)]
    db = _history(tmp_path, runs)
    assert list(history.series(db)) == [("vllm", "nightly", "cuda", "m", "v2@build",
                                         "v2@build")]
    code, out, err = _report(db, tmp_path, capsys)
    assert code == 1, (out, err)
    assert commit(8)[:10] in out.strip().splitlines()[-1]
    assert history.group_label("v1") == "v1" and history.group_label(None) is None


def test_a_flat_history_exits_0(tmp_path, capsys):
    db = _history(tmp_path, [_run(tmp_path, day, ratio=1.0 + 0.01 * (day % 3))
                             for day in range(1, 11)])
    code, out, err = _report(db, tmp_path, capsys)
    assert code == 0 and err == ""
    assert out.strip().splitlines() == [
        f"history: no newest run starts a change point (0 change points in 10 runs); "
        f"report: {tmp_path / 'h.html'}"]


NOISE = [1.00, 1.02, 0.99, 1.01, 0.98, 1.02, 1.00, 0.99]


def test_a_noisy_latency_step_fails_the_night_it_becomes_significant(tmp_path, capsys):
    """A P99 ratio is noisy: one run of +50 % is no change yet; the second confirms it
    (exit 1, naming the first of the two, day 9); the third is a known change (exit 0)."""
    db = _history(tmp_path, [_run(tmp_path, day, ratio=r) for day, r in enumerate(NOISE, 1)])
    nights = {9: 0, 10: 1, 11: 0}
    for day, want in nights.items():
        history.add(db, [_run(tmp_path, day, ratio=1.5 + 0.01 * (day % 2))])
        code, out, _ = _report(db, tmp_path, capsys)
        assert code == want, (day, out)
    code, out, _ = _report(db, tmp_path, capsys, "--json")
    [c] = json.loads(out)["changes"]
    assert (c["metric"], c["run_number"], c["candidate_vllm_commit"]) == \
        ("p99_e2el_ms ratio", 9, commit(9))


def test_two_lone_values_at_the_end_are_no_regime():
    """Noise, then +50 % twice: the step is the pair's (index 8), never a "change" from
    the first lone value to the second, which would pass as an exactly constant step."""
    from mrbench.harness.checks.changepoint import detect
    from mrbench.harness.show.history_report import newest_change
    vals = NOISE + [1.5, 1.51]
    th = dict(min_rel=0.2)
    top = newest_change(vals, detect(vals, **th), 0.05, th)
    assert top is not None and top.index == 8


def test_the_bundled_runner_is_named_with_mrbenchs_sha(tmp_path, capsys):
    runs = [_run(tmp_path, day, ops=100.0 if day < 6 else 90.0, target="bundled")
            for day in range(1, 7)]
    db = _history(tmp_path, runs)
    with sqlite3.connect(db) as con:
        assert set(con.execute(f"SELECT {', '.join(history.BUILD_COLUMNS)} FROM runs")) == \
            {(None,) * 4}
    code, out, _ = _report(db, tmp_path, capsys)
    assert code == 1
    assert "bundled runner, mrbench 06ffffffff" in out.strip().splitlines()[-1]


def test_gate_runs_limit_the_exit_code_to_their_groups(tmp_path, capsys):
    """A comparison no longer run whose newest run started a change does not fail every
    later night: `--gate-run` names the groups tonight's runs belong to."""
    runs = [_run(tmp_path, day, ops=100.0 if day < 6 else 90.0) for day in range(1, 7)]
    other = _run(tmp_path, 20, target="bundled")
    db = _history(tmp_path, [*runs, other])
    assert _report(db, tmp_path, capsys)[0] == 1
    assert _report(db, tmp_path, capsys, "--gate-run", str(other))[0] == 0
    assert _report(db, tmp_path, capsys, "--gate-run", str(runs[-1]))[0] == 1
    code, out, err = _report(db, tmp_path, capsys, "--gate-run", str(tmp_path / "nowhere"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "not in the history" in err


def test_bad_flags_are_one_line_and_exit_2(tmp_path, capsys):
    db = _history(tmp_path, [_run(tmp_path, 1)])
    code, _, err = _report(db, tmp_path, capsys, "--latency-min-rel", "-1")
    assert code == 2 and err.strip().splitlines() == [
        "mrbench: error: --latency-min-rel must be >= 0, got -1.0"]


def _v1_db(path, runs):
    """A schema-1 history written with schema 1's SQL: ops per step of each (day, ops)."""
    with sqlite3.connect(path) as con:
        con.executescript(V1_SCHEMA)
        con.execute("INSERT INTO meta VALUES ('schema', '1')")
        for day, ops in runs:
            cur = con.execute(
                "INSERT INTO runs (run_dir, git_sha, created, target, suite, device, model, "
                "baseline, candidate, faults, verdict) VALUES (?, ?, ?, 'vllm', 'nightly', "
                "'cuda', 'm', 'v1', 'v2', '[]', 'pass')",
                (f"/old/run-{day:02d}", f"{day:02d}" + "e" * 38, f"2026-10-{day:02d}T03:17:00"))
            con.execute("INSERT INTO metrics VALUES (?, 'w', 'candidate', 'ops_per_step', ?)",
                        (cur.lastrowid, ops))
    con.close()
    return path


def test_a_schema_1_history_is_read_unchanged_and_migrated_by_add(tmp_path, capsys):
    db = _v1_db(tmp_path / "h.sqlite", [(d, 100.0) for d in range(1, 8)])
    before = db.read_bytes()
    code, out, err = _report(db, tmp_path, capsys)
    assert code == 0 and err == "" and "0 change points in 7 runs" in out
    assert main(["history", "list", "--db", str(db)]) == 0
    assert db.read_bytes() == before                       # reading never writes
    # add migrates in place, in its transaction: old rows keep NULL builds
    assert main(["history", "add", str(_run(tmp_path, 31, ops=120.0)), "--db",
                 str(db)]) == 0
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == \
            (history.SCHEMA_VERSION,)
        rows = con.execute("SELECT candidate_vllm_commit, candidate_vllm_version FROM runs "
                           "ORDER BY created").fetchall()
    assert rows == [(None, None)] * 7 + [(commit(31), "0.26.1")]
    code, out, _ = _report(db, tmp_path, capsys)
    last = out.strip().splitlines()[-1]
    assert code == 1 and commit(31)[:10] in last
    assert "last good: no vLLM build recorded, mrbench 07eeeeeeee" in last


def test_a_newer_schema_is_refused_untouched(tmp_path, capsys):
    db = _v1_db(tmp_path / "h.sqlite", [(1, 100.0)])
    with sqlite3.connect(db) as con:
        con.execute("UPDATE meta SET value = '99'")
    con.close()
    before = db.read_bytes()
    for args in (["history", "report"], ["history", "list"],
                 ["history", "add", str(_run(tmp_path, 1))]):
        capsys.readouterr()
        assert main([*args, "--db", str(db)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "schema '99'" in err[0], err
        assert db.read_bytes() == before


def test_a_failed_first_add_leaves_no_file(tmp_path, monkeypatch):
    """Creating a history is one transaction too: a failure in it leaves no half-made file."""
    db = tmp_path / "h.sqlite"
    monkeypatch.setattr(history, "_SCHEMA", history._SCHEMA + "; CREATE TABLE runs (x)")
    with pytest.raises(sqlite3.OperationalError):
        history.add(db, [_run(tmp_path, 1)])
    assert not db.exists()


class _Side(BaseModel):
    model: str
    device: str
    vllm_version: str | None = None
    vllm_commit: str | None = None


class _Summary(BaseModel):
    verdict: str
    suite: str
    target: str
    baseline: str
    candidate: str
    candidate_faults: list[str] = []
    metrics: dict[str, dict[str, dict[str, float]]] = {}
    checks: list[dict] = []


def test_typed_records_read_like_dicts(tmp_path):
    """record_of takes the manifest and summary as dicts or as typed records with the same
    field names (what `results.read_run` may return), with the same result."""
    side = dict(model="m", device="cuda", vllm_version="0.26.1", vllm_commit=commit(3))
    manifest = dict(created="2026-11-03", resolved=dict(w=dict(candidate=side, baseline=side)))
    summary = dict(verdict="pass", suite="s", target="vllm", baseline="v1", candidate="v2",
                   metrics=dict(w=dict(candidate=dict(p99_e2el_ms=5.0))),
                   checks=[dict(workload="w", metric="ops_per_step", baseline=1.0,
                                candidate=2.0, verdict="pass")])
    typed_manifest = dict(manifest, resolved=dict(w=dict(candidate=_Side(**side),
                                                         baseline=_Side(**side))))
    plain = history.record_of(manifest, summary, tmp_path)
    typed = history.record_of(typed_manifest, _Summary(**summary), tmp_path)
    assert plain == typed
    assert plain[0]["candidate_vllm_commit"] == commit(3)
