"""harness/record/results.py as the one writer and reader of a results directory: the format
version, storage that does not render, the report of a run's final directory, and compare
and report reading the same rows."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from mrbench.contract import BadInput, SideResult
from mrbench.harness.cli import main
from mrbench.harness.record import results
from mrbench.harness.record.errors import ResultsNotWritten
from mrbench.harness.record.results import (
    RESULTS_FORMAT,
    RunWriter,
    check_format,
    load_side,
    read_record,
    read_run,
    read_table,
)
from mrbench.harness.record.run_record import Manifest, RunSummary, RunVerdict
from mrbench.harness.show import report as report_mod
from mrbench.harness.show.report import render_report

FIX = Path(__file__).resolve().parent / "fixtures" / "vllm_bench"
NEWER = RESULTS_FORMAT + 1


def run_cli(args, capsys):
    code = main([str(a) for a in args])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def one_error_line(code: int, err: str) -> str:
    assert code == 2, err
    lines = [x for x in err.strip().splitlines() if x]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def imported(tmp_path, capsys) -> Path:
    """A real results directory, as `mrbench import-bench` writes it (fast: no engine)."""
    out = tmp_path / "imported"
    code, _, err = run_cli(["import-bench", FIX / "latency_base.json", "--out", out], capsys)
    assert code == 0, err
    return out


def _set_format(run: Path, fmt) -> None:
    m = json.loads((run / "manifest.json").read_text())
    if fmt is None:
        del m["results_format"]
    else:
        m["results_format"] = fmt
    (run / "manifest.json").write_text(json.dumps(m))


# ---- the format version ------------------------------------------------------------------

def test_commit_stamps_the_format_and_renders_nothing(tmp_path):
    manifest = Manifest(note="caller's manifest")
    path = RunWriter(tmp_path / "r").commit(manifest, RunSummary.build([]))
    assert path == tmp_path / "r"
    assert json.loads((path / "manifest.json").read_text())["results_format"] == RESULTS_FORMAT
    assert manifest.results_format == 1                  # the caller's model is not changed
    assert not (path / "report.html").exists()           # storage does not render
    assert [p.name for p in tmp_path.iterdir()] == ["r"]   # no hidden temp left


@pytest.mark.parametrize("fails_at", ["summary.json", "the rename"])
def test_a_full_disk_at_the_commit_leaves_nothing_and_says_so(tmp_path, monkeypatch, fails_at):
    """ENOSPC while the hidden directory is written, or as it is renamed into place: no run
    at `out`, no hidden directory left, one line naming `out`, the filesystem and ENOSPC."""
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "r" / fails_at))
    if fails_at == "summary.json":
        write_text = Path.write_text
        monkeypatch.setattr(Path, "write_text", lambda self, *a, **k: (
            _raise(full) if self.name == "summary.json" else write_text(self, *a, **k)))
    else:
        monkeypatch.setattr(results.os, "replace", lambda *a: _raise(full))
    with pytest.raises(ResultsNotWritten) as e:
        RunWriter(tmp_path / "r").commit(Manifest(), RunSummary.build([]))
    assert list(tmp_path.iterdir()) == []
    line = str(e.value)
    assert "\n" not in line and e.value.errno == errno.ENOSPC
    assert line.startswith(f"the results could not be written to {tmp_path / 'r'}: No space "
                           f"left on device [ENOSPC] writing {fails_at} on the filesystem "
                           "mounted at /"), line


def _raise(e: BaseException):
    raise e


def test_a_newer_format_is_refused_in_one_line(imported, tmp_path, capsys):
    _set_format(imported, NEWER)
    want = (f"{imported}: results format {NEWER} is newer than this mrbench reads "
            f"({RESULTS_FORMAT}); upgrade mrbench")
    for read in (read_run, lambda r: read_table(r, "requests"),
                 lambda r: load_side(r, "vllm-bench-latency", "candidate"), render_report):
        with pytest.raises(BadInput) as e:
            read(imported)
        assert str(e.value) == want
    (imported / "report.html").unlink()
    for args in (["report", imported], ["report", "--markdown", imported],
                 ["compare", imported, imported, "--out", tmp_path / "cmp"],
                 ["history", "add", imported, "--db", tmp_path / "h.sqlite"]):
        code, _, err = run_cli(args, capsys)
        assert one_error_line(code, err) == f"mrbench: error: {want}", args
    assert not (imported / "report.html").exists()
    assert not (tmp_path / "cmp").exists() and not (tmp_path / "h.sqlite").exists()


def test_a_run_without_the_field_is_format_1(imported, tmp_path, capsys):
    _set_format(imported, None)                  # a run written before the field existed
    manifest, summary = read_record(imported)
    assert manifest.results_format == 1 and summary.verdict == RunVerdict.IMPORTED
    assert read_table(imported, "requests") is not None
    code, _, err = run_cli(["report", imported], capsys)
    assert code == 0, err
    code, _, err = run_cli(["compare", imported, imported, "--out", tmp_path / "cmp"], capsys)
    assert code == 0, err


def test_a_format_that_is_not_a_version_is_refused():
    for bad in ("1", 0, 1.5, True, None):
        with pytest.raises(BadInput, match="is not a format version"):
            check_format({"results_format": bad}, Path("RUN"))
    check_format({}, Path("RUN"))
    check_format({"results_format": RESULTS_FORMAT}, Path("RUN"))


# ---- the report names the final directory ------------------------------------------------

def _run_dir_line(html: str) -> str:
    return html.split("run directory: <code>", 1)[1].split("</code>", 1)[0]


def test_the_report_names_the_final_directory_not_a_temp_one(imported, tmp_path, capsys):
    html = (imported / "report.html").read_text()
    assert _run_dir_line(html) == str(imported)
    assert "/.imported." not in html
    out = tmp_path / "cmp"                          # compare writes and renders a run too
    code, stdout, err = run_cli(["compare", imported, imported, "--out", out], capsys)
    assert code == 0, err
    assert stdout.strip().splitlines()[-1] == f"report: {out / 'report.html'}"
    html = (out / "report.html").read_text()
    assert _run_dir_line(html) == str(out) and "/.cmp." not in html


# ---- one reader: compare and report read the same rows -----------------------------------

WL = "007"      # pandas reads this as the integer 7 unless told the column is text


def _numeric_named_run(d: Path) -> Path:
    w = RunWriter(d)
    for side, n in (("baseline", 5), ("candidate", 7)):
        res = SideResult(resolved={"runner": side})
        res.requests = [dict(req_index=i, ttft_ms=10.0 + i, e2e_ms=50.0 + i,
                             output_tokens=3 + i) for i in range(n)]
        res.tokens = [[1, 2, 3] for _ in range(n)]
        w.add_side(WL, side, res)
    return w.commit(Manifest(workloads={WL: {"entry": WL}}, suite={}),
                    RunSummary.build([], suite="numeric"))


def test_compare_and_report_read_the_same_rows_of_a_numeric_looking_workload(tmp_path,
                                                                             capsys):
    run = _numeric_named_run(tmp_path / "run")
    # compare's reader
    cand = load_side(run, WL, "candidate")
    assert [r["req_index"] for r in cand.requests] == list(range(7))
    assert len(load_side(run, WL, "baseline").requests) == 5 and len(cand.tokens) == 7
    # the report's reader is the same function: the same rows, under the same name
    table = report_mod._read_table(run, "requests")
    rows = table[(table["workload"] == WL) & (table["side"] == "candidate")]
    assert rows["req_index"].tolist() == [r["req_index"] for r in cand.requests]
    assert rows["output_tokens"].tolist() == [r["output_tokens"] for r in cand.requests]
    html = render_report(run).read_text()
    assert "requests: baseline 5, candidate 7" in html
    # end to end: compare's summary counts those rows, and its report shows them
    out = tmp_path / "cmp"
    code, _, err = run_cli(["compare", run, run, "--out", out], capsys)
    assert code == 0, err
    s = json.loads((out / "summary.json").read_text())
    assert s["metrics"][WL]["candidate"]["total_output_tokens"] == sum(3 + i for i in range(7))
    assert "requests: baseline 7, candidate 7" in (out / "report.html").read_text()


def test_an_unreadable_table_is_one_line_for_compare_and_a_skipped_plot_for_report(
        tmp_path, capsys, caplog):
    run = _numeric_named_run(tmp_path / "run")
    (run / "requests.csv").write_bytes(b"workload,side\n\xff\xfe\xfa,\x00\xc3\n")
    code, _, err = run_cli(["compare", run, run, "--out", tmp_path / "cmp"], capsys)
    line = one_error_line(code, err)
    assert f"{run / 'requests.csv'}: unreadable table" in line
    assert render_report(run).is_file()            # the report is still written, and says why
    assert "requests.csv: unreadable table" in caplog.text


@pytest.mark.parametrize("text, words", [
    ("{bad", "corrupt JSON in faults.json"),
    ("[1]", "faults.json is not a JSON object"),
    (json.dumps({"results_format": NEWER, "clean": {}, "faults": {}}),
     f"results format {NEWER} is newer than this mrbench reads"),
    (json.dumps({"suite": "quick"}), "faults.json is not a fault matrix"),
])
def test_a_bad_faults_json_is_one_line_for_report_markdown(tmp_path, capsys, text, words):
    (tmp_path / "faults.json").write_text(text)
    code, out, err = run_cli(["report", "--markdown", tmp_path], capsys)
    assert words in one_error_line(code, err) and not out


def test_a_campaigns_result_is_stamped_with_the_format(tmp_path):
    """faults.json, calibration.json and power.json carry results_format like a manifest,
    so a reader can refuse a newer one (read_campaign)."""
    from mrbench.harness.campaigns.campaign import guarded
    from mrbench.harness.record.results import read_campaign
    from mrbench.harness.record.study_record import PowerStudy
    study = PowerStudy(suite="s", n=0, power_target=0.8, results_format=1)
    res, path = guarded(tmp_path / "camp", lambda camp: study)
    assert read_campaign(path, "power.json")["results_format"] == RESULTS_FORMAT
