"""History: real runs into SQLite, a trend report whose change points mark the first run of a
fault, `compare --baseline last-pass`, and bad databases refused untouched."""
import json
import sqlite3

import pytest
from support.suites import TINY

from mrbench.harness.cli import main

pytestmark = pytest.mark.slow       # harness runs with engines: CI runs them

N_RUNS, FAULT_FROM = 8, 5          # runs 1-4 clean, runs 5-8 with the fault


@pytest.fixture(scope="module")
def hist(tmp_path_factory):
    root = tmp_path_factory.mktemp("hist")
    (root / "tiny.yaml").write_text(TINY)
    runs = []
    for i in range(1, N_RUNS + 1):
        fault = ["--fault", "seq-lens-sync"] if i >= FAULT_FROM else []
        out = root / f"run-{i}"
        # in-process: this tests the history, not engine isolation (saves a spawn per side)
        assert main(["run", str(root / "tiny.yaml"), "--out", str(out), "--in-process",
                     *fault]) in (0, 1)
        runs.append(out)
    db = root / "h.sqlite"
    assert main(["history", "add", *map(str, runs), "--db", str(db)]) == 0
    return root, db, runs


def test_trend_report_marks_the_first_faulty_run_and_nothing_else(hist, capsys):
    root, db, _ = hist
    capsys.readouterr()
    code = main(["history", "report", "--db", str(db), "--out", str(root / "h.html"), "--json"])
    res = json.loads(capsys.readouterr().out)
    assert code == 0 and res["runs"] == N_RUNS
    marked = {(c["workload"], c["metric"]): c["run_number"] for c in res["changes"]}
    assert marked.get(("g", "syncs_per_step")) == FAULT_FROM
    # the fault adds the read of seq_lens (ops, an allocation) and nothing else
    affected = {"syncs_per_step", "ops_per_step", "allocs_per_step"}
    for (wl, metric), run in marked.items():
        assert metric in affected and run == FAULT_FROM, (metric, run)
    html = (root / "h.html").read_text()
    assert 'id="change-table"' in html and "syncs_per_step" in html
    assert "http" not in html.replace("http-equiv", "")


def test_history_add_is_idempotent_and_keyed(hist):
    _, db, runs = hist
    assert main(["history", "add", str(runs[0]), "--db", str(db)]) == 0
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT git_sha, suite, target, device, candidate, baseline, verdict "
                           "FROM runs ORDER BY id").fetchall()
    assert len(rows) == N_RUNS
    assert {r[1:6] for r in rows} == {("tiny", "bundled", "cpu", "v2", "v1")}
    assert [r[6] for r in rows] == ["pass"] * (FAULT_FROM - 1) + \
        ["regression"] * (N_RUNS - FAULT_FROM + 1)


def test_compare_against_the_last_passing_run(hist, tmp_path, capsys):
    _, db, runs = hist
    capsys.readouterr()
    code = main(["compare", str(runs[-1]), "--baseline", "last-pass", "--db", str(db),
                 "--out", str(tmp_path / "cmp")])
    out = capsys.readouterr().out
    assert f"baseline: {runs[FAULT_FROM - 2].resolve()}" in out
    assert code == 1            # the candidate side has the sync; the last clean run has none


def _refused(args, capsys):
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("mrbench: error: history"), err


def test_a_missing_database_is_refused_and_not_created(tmp_path, capsys):
    db = tmp_path / "missing.sqlite"
    for cmd in ("report", "list"):
        _refused(["history", cmd, "--db", str(db)], capsys)
    assert not db.exists()


@pytest.mark.parametrize("kind", ["garbage", "other-schema"])
def test_a_corrupt_database_is_refused_untouched(tmp_path, capsys, hist, kind):
    _, _, runs = hist
    db = tmp_path / "h.sqlite"
    if kind == "garbage":
        db.write_bytes(b"not a database at all " * 100)
    else:
        with sqlite3.connect(db) as con:
            con.execute("CREATE TABLE other (x)")
    before = db.read_bytes()
    for args in (["history", "report"], ["history", "list"], ["history", "add", str(runs[0])]):
        _refused([*args, "--db", str(db)], capsys)
        assert db.read_bytes() == before


def test_adding_a_non_run_changes_nothing(tmp_path, capsys, hist):
    _, db, _ = hist
    before = db.read_bytes()
    code = main(["history", "add", str(tmp_path), "--db", str(db)])
    assert code == 2 and db.read_bytes() == before


def _synthetic_db(path, cand, base, metric="p99_e2el_ms"):
    """A history written straight into the schema: one workload, both sides of `metric`."""
    from mrbench.harness.record import history
    with sqlite3.connect(path) as con:
        con.executescript(history._SCHEMA)
        con.execute("INSERT INTO meta VALUES ('schema', ?)", (history.SCHEMA_VERSION,))
        for i, (c, b) in enumerate(zip(cand, base), 1):
            cur = con.execute("INSERT INTO runs (run_dir, created, target, suite, device, "
                              "candidate, baseline, verdict) VALUES (?, ?, 'bundled', 's', "
                              "'cpu', 'v2', 'v1', 'pass')", (f"/r{i}", f"2026-11-{i:02d}"))
            con.executemany("INSERT INTO metrics VALUES (?, 'w', ?, ?, ?)",
                            [(cur.lastrowid, "candidate", metric, c),
                             (cur.lastrowid, "baseline", metric, b)])
    return path


def test_machine_drift_moving_both_sides_is_not_a_latency_change(tmp_path):
    """The machine slows by 40 % from run 5 on both sides: the ratio trend stays flat (no
    change), the absolute trend (opt-in) marks run 5; a candidate-only slowdown is marked."""
    from mrbench.harness.show.history_report import analyse
    base = [100, 102, 99, 101, 140, 141, 139, 142]
    drift = _synthetic_db(tmp_path / "d.sqlite", [b * 1.05 for b in base], base)
    marked = lambda res: [(c["metric"], c["index"] + 1) for g in res["groups"]
                          for c in g["changes"]]
    assert marked(analyse(drift)) == []
    assert marked(analyse(drift, absolute_latency=True)) == [("p99_e2el_ms", 5)]
    cand = [b * (1.0 if i < 4 else 1.5) for i, b in enumerate([100] * 8)]
    own = _synthetic_db(tmp_path / "o.sqlite", cand, [100] * 8)
    assert marked(analyse(own)) == [("p99_e2el_ms ratio", 5)]
