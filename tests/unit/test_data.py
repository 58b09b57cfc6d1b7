"""Where data is found (mrbench.contract.paths) and `mrbench data` / `mrbench data fetch`:
the package's slices when no data directory exists, a slice asked for more rows than it
holds is one line, the listing names each suite's files, and a fetch writes a checked file
with its licence or nothing at all (no network: one line, exit 3)."""
import functools
import http.server
import json
import threading
from dataclasses import replace

import pytest

from mrbench.contract import BadInput, paths
from mrbench.harness.cli import main
from mrbench.harness.commands import data as data_cmd
from mrbench.workloads.traces import load_trace


@pytest.fixture
def no_data_dirs(tmp_path, monkeypatch):
    """No $MRBENCH_DATA_DIR, no ../shared/data beside the checkout, an empty fetch cache."""
    monkeypatch.delenv(paths.DATA_DIR_ENV, raising=False)
    monkeypatch.setattr(paths, "CHECKOUT", tmp_path / "checkout")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def test_without_a_data_directory_the_packaged_slices_are_used(no_data_dirs):
    assert paths.data_origin() == ("packaged", paths.PACKAGED)
    reqs = load_trace("mooncake_conversation_trace.jsonl", limit=24)
    assert len(reqs) == 24
    for f in paths.DATA_FILES:               # each packaged slice holds what the registry says
        if f.packaged_rows:
            assert data_cmd.count_rows(paths.PACKAGED / f.path) == f.packaged_rows
            assert (paths.PACKAGED / f.path).with_name(f.licence).is_file()


def test_a_fetched_cache_comes_before_the_slices_and_the_env_var_before_all(
        no_data_dirs, monkeypatch):
    cache = no_data_dirs / "cache" / "mrbench" / "data"
    cache.mkdir(parents=True)
    assert paths.data_origin() == ("cache", cache)
    monkeypatch.setenv(paths.DATA_DIR_ENV, str(no_data_dirs / "nowhere"))
    assert paths.data_origin() == (paths.DATA_DIR_ENV, no_data_dirs / "nowhere")


def test_a_slice_asked_for_more_rows_than_it_holds_is_one_line(no_data_dirs):
    with pytest.raises(BadInput, match="packaged slice holds 1000 rows, 1001 were asked"):
        load_trace("mooncake_conversation_trace.jsonl", limit=1001)
    code = main(["run", "trace", "--limit", "1001", "--out", str(no_data_dirs / "run")])
    assert code == 2 and not (no_data_dirs / "run").exists()


def test_data_lists_each_file_where_it_was_found_and_who_reads_it(no_data_dirs, capsys):
    assert main(["data", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["origin"] == "packaged"
    files = {f["file"]: f for f in info["files"]}
    trace = files["traces/mooncake_conversation_trace.jsonl"]
    assert trace["rows"] == 1000 and "quick:trace-pd (24 rows)" in trace["needed_by"]
    assert files["traces/azure_llm_2023_conv.csv"]["found"] is None
    assert main(["data"]) == 0
    assert "(the packaged slice)" in capsys.readouterr().out


@pytest.fixture
def served(tmp_path):
    """A local HTTP server over tmp_path/www (the tests have no network)."""
    www = tmp_path / "www"
    www.mkdir()
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):            # not on the command's stderr
            pass
    handler = functools.partial(Quiet, directory=str(www))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield www, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _one_file(monkeypatch, url, packaged_rows=2):
    f = replace(paths.DATA_FILES[0], url=url, packaged_rows=packaged_rows)
    monkeypatch.setattr(data_cmd, "DATA_FILES", (f,))
    return f


def test_fetch_writes_the_checked_file_and_its_licence(tmp_path, monkeypatch, served):
    www, base = served
    (www / "test.jsonl").write_text('{"question": "q", "answer": "a"}\n' * 3)
    f = _one_file(monkeypatch, f"{base}/test.jsonl")
    dest = tmp_path / "dest"
    assert main(["data", "fetch", "--dest", str(dest)]) == 0
    assert data_cmd.count_rows(dest / f.path) == 3
    assert (dest / "gsm8k" / f.licence).is_file()
    assert sorted(p.name for p in (dest / "gsm8k").iterdir()) == [f.licence, "test.jsonl"]


@pytest.mark.parametrize("body, why", [("<html>moved</html>\n", "line 1 is not JSON"),
                                       ('{"question": "q"}\n', "1 rows, fewer than")])
def test_fetch_of_something_else_leaves_nothing(tmp_path, monkeypatch, served, capsys,
                                                body, why):
    www, base = served
    (www / "test.jsonl").write_text(body)
    _one_file(monkeypatch, f"{base}/test.jsonl")
    dest = tmp_path / "dest"
    assert main(["data", "fetch", "--dest", str(dest)]) == 3
    err = capsys.readouterr().err
    assert why in err and len(err.strip().splitlines()) == 1
    assert not dest.exists()


def test_fetch_without_a_network_is_one_line_and_writes_nothing(tmp_path, monkeypatch,
                                                                  capsys):
    _one_file(monkeypatch, "http://127.0.0.1:9/test.jsonl")     # nothing listens on port 9
    dest = tmp_path / "dest"
    assert main(["data", "fetch", "--dest", str(dest)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no network here?" in err[0] and not dest.exists()


def test_fetch_refuses_an_unknown_file(capsys):
    assert main(["data", "fetch", "nope.jsonl"]) == 2
    assert "unknown data file" in capsys.readouterr().err
