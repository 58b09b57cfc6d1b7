"""An engine whose start compiled its kernels is started again in a new process before it is
measured (`--cold-engines rebuild`, the default on CUDA), so both sides of a comparison run in
processes that loaded their kernels from the cache; `keep` (the default on CPU) measures it as
it is. Either way every result records what each start wrote (harness.compile_cache).

The "jitcache" test target keeps a kernel per engine shape under TRITON_CACHE_DIR the way
Triton's file cache does, and says which kernels its process compiled itself."""
import json

import pytest
import support.jit_cache  # noqa: F401  (registers the "jitcache" target in this process)
from support.suites import three_gsm8k

from mrbench.harness.cli import main

pytestmark = pytest.mark.slow       # harness runs with engines: CI runs them


@pytest.fixture
def caches(tmp_path, monkeypatch):
    """Empty compile caches of every kind the harness counts, and the test target loaded in
    every engine process."""
    for var in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "VLLM_CACHE_ROOT"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.setenv("MRBENCH_TARGET_MODULES", "support.jit_cache")
    return tmp_path


def _run(tmp_path, capsys, *flags, suite_text=three_gsm8k()):
    suite = tmp_path / "three.yaml"
    suite.write_text(suite_text)
    out = tmp_path / f"run{'-'.join(flags)}"
    code = main(["run", str(suite), "--target", "jitcache", "--candidate", "v2",
                 "--baseline", "v2", "--out", str(out), *flags])
    err = capsys.readouterr().err
    assert code == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    return manifest, err, (out / "report.html").read_text()


def test_an_engine_that_compiled_at_start_is_measured_in_a_new_process(caches, capsys):
    manifest, err, html = _run(caches, capsys, "--cold-engines", "rebuild")
    assert manifest["isolation"]["cold_engines"] == "rebuild"
    res = manifest["resolved"]
    for wid in ("a", "b", "c"):
        for side in ("candidate", "baseline"):
            # the measured process compiled nothing: every kernel came from the cache
            assert res[wid][side]["compiled_in_process"] == [], (wid, side)
            assert res[wid][side]["engine_start"]["compile_cache_writes"] == {}
    # the candidate is built first: its start of each new shape (a, then b) compiled one
    # kernel, so it was started again in a new process; the baseline then found it cached
    for wid in ("a", "b"):
        cand = res[wid]["candidate"]["engine_start"]
        assert cand["rebuilt_after"]["compile_cache_writes"] == {"triton": 1}
        assert cand["rebuilt_after"]["pid"] != cand["pid"] == res[wid]["candidate"]["pid"]
        assert "rebuilt_after" not in res[wid]["baseline"]["engine_start"]
    assert res["c"]["candidate"]["engine_start"] == res["a"]["candidate"]["engine_start"]  # reused
    rebuilds = [ln for ln in err.splitlines() if "starting it again in a new process" in ln]
    assert len(rebuilds) == 2 and all("candidate" in ln and "1 file in the triton cache" in ln
                                      for ln in rebuilds)
    assert "in a new process after a start that compiled (1 file in the triton cache)" in html


def test_keep_measures_the_engine_that_compiled_and_records_it(caches, capsys):
    manifest, err, html = _run(caches, capsys)          # CPU: `auto` keeps
    assert manifest["isolation"]["cold_engines"] == "keep"
    res = manifest["resolved"]
    for wid in ("a", "b"):
        cand, base = res[wid]["candidate"], res[wid]["baseline"]
        assert cand["engine_start"]["compile_cache_writes"] == {"triton": 1}
        assert "rebuilt_after" not in cand["engine_start"]
        assert len(cand["compiled_in_process"]) == (1 if wid == "a" else 2)
        assert base["engine_start"]["compile_cache_writes"] == {}
        assert base["compiled_in_process"] == []
    assert "starting it again" not in err
    assert "compiled (1 file in the triton cache)" in html and "loaded from the caches" in html


def test_a_rebuild_whose_start_writes_again_ends_rebuilding_for_the_run(caches, capsys,
                                                                        monkeypatch):
    """A cache that never hits (or a tool that writes at every start): one rebuild shows it,
    and the run measures the rest as they start instead of paying a start twice each."""
    monkeypatch.setenv("JITCACHE_NEVER_HITS", "1")
    one = three_gsm8k().split("  - id: b")[0]
    manifest, err, _ = _run(caches, capsys, "--cold-engines", "rebuild", suite_text=one)
    cand = manifest["resolved"]["a"]["candidate"]["engine_start"]
    base = manifest["resolved"]["a"]["baseline"]["engine_start"]
    assert cand["rebuilt_after"]["compile_cache_writes"] == {"triton": 1}
    assert cand["compile_cache_writes"] == {"triton": 1}
    assert base["compile_cache_writes"] == {"triton": 1} and "rebuilt_after" not in base
    assert "no more rebuilds in this run" in err
    assert err.count("starting it again in a new process") == 1


def test_a_cache_that_fills_in_layers_is_rebuilt_until_a_start_loads_everything(
        caches, capsys, monkeypatch):
    """The start that compiled wrote two files, its rebuild still one (a kernel the loading
    path builds): that rebuild is started once more, and the start measured wrote nothing."""
    monkeypatch.setenv("JITCACHE_LAYERED", "1")
    one = three_gsm8k().split("  - id: b")[0]
    manifest, err, _ = _run(caches, capsys, "--cold-engines", "rebuild", suite_text=one)
    cand = manifest["resolved"]["a"]["candidate"]
    start = cand["engine_start"]
    assert start["compile_cache_writes"] == {} and cand["compiled_in_process"] == []
    assert start["rebuilt_after"]["compile_cache_writes"] == {"triton": 1}
    assert start["rebuilt_after"]["rebuilt_after"]["compile_cache_writes"] == {"triton": 2}
    assert "compiled fewer kernels, but some" in err and "wrote again" not in err
    base = manifest["resolved"]["a"]["baseline"]
    assert base["engine_start"]["compile_cache_writes"] == {} and base["compiled_in_process"] == []
