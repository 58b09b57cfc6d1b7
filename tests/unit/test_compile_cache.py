"""harness.run.engines.compile_cache: where each tool keeps its compiled kernels, and what a
start wrote."""
from pathlib import Path

from mrbench.harness.run.engines import compile_cache as cc


def test_cache_dirs_follow_each_tools_own_rule(monkeypatch, tmp_path):
    for var in ("TRITON_CACHE_DIR", "TRITON_HOME", "TORCHINDUCTOR_CACHE_DIR", "VLLM_CACHE_ROOT",
                "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    d = cc.cache_dirs()
    assert d["triton"] == tmp_path / ".triton" / "cache"
    assert d["vllm"] == tmp_path / ".cache" / "vllm"
    assert d["inductor"].name.startswith("torchinductor_")
    monkeypatch.setenv("TRITON_HOME", str(tmp_path / "th"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    d = cc.cache_dirs()
    assert d["triton"] == tmp_path / "th" / ".triton" / "cache"
    assert d["vllm"] == tmp_path / "xdg" / "vllm"
    for var, key in (("TRITON_CACHE_DIR", "triton"), ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
                     ("VLLM_CACHE_ROOT", "vllm")):
        monkeypatch.setenv(var, str(tmp_path / var))
        assert cc.cache_dirs()[key] == tmp_path / var


def test_a_start_that_adds_files_is_seen_and_one_that_reads_is_not(tmp_path):
    dirs = {"triton": tmp_path / "t", "inductor": tmp_path / "missing"}
    assert cc.file_counts(dirs) == {"triton": 0, "inductor": 0}

    def compile_two() -> str:
        (tmp_path / "t" / "k1").mkdir(parents=True)
        for name in ("k1/a.cubin", "k1/a.json"):
            Path(tmp_path / "t" / name).write_text("x")
        return "engine"

    before = cc.file_counts(dirs)
    compile_two()
    assert cc.new_files(before, cc.file_counts(dirs)) == {"triton": 2}
    before = cc.file_counts(dirs)
    (tmp_path / "t" / "k1" / "a.cubin").read_text()            # a warm start only reads
    assert cc.new_files(before, cc.file_counts(dirs)) == {}
    assert cc.describe({"triton": 2, "inductor": 5}) == \
        "5 files in the inductor cache, 2 files in the triton cache"
    assert cc.describe({}) == "nothing"
    assert cc.describe({"vllm": 1}) == "1 file in the vllm cache"


def test_counting_writes_wraps_a_start(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "t"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "i"))
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "v"))

    def start() -> int:
        (tmp_path / "v" / "graphs").mkdir(parents=True)
        (tmp_path / "v" / "graphs" / "g.py").write_text("x")
        return 7

    assert cc.counting_writes(start) == (7, {"vllm": 1})
    assert cc.counting_writes(lambda: 8) == (8, {})


def test_a_recorded_start_reads_as_compiled_loaded_or_rebuilt():
    assert cc.describe_start(None) == "?"
    assert cc.describe_start({"compile_cache_writes": {}}) == "loaded from the caches"
    assert cc.describe_start({"compile_cache_writes": {"triton": 3}}) == \
        "compiled (3 files in the triton cache)"
    assert cc.describe_start({"compile_cache_writes": {}, "rebuilt_after": {
        "compile_cache_writes": {"inductor": 54}}}) == \
        "loaded from the caches, in a new process after a start that compiled " \
        "(54 files in the inductor cache)"
