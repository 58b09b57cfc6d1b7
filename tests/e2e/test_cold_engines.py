"""An engine whose start compiled its kernels is started again in a new process before it is
measured (`--cold-engines rebuild`, the default on CUDA), so both sides of a comparison run in
processes that loaded their kernels from the cache; `keep` (the default on CPU) measures it as
it is. Either way every result records what each start wrote (harness.run.engines.compile_cache).

The "jitcache" test target keeps a kernel per engine shape under TRITON_CACHE_DIR the way
Triton's file cache does, and says which kernels its process compiled itself."""
import pytest
from support.side_by_side import run_variants
from support.suites import three_gsm8k

pytestmark = pytest.mark.slow       # harness runs with engines: CI runs them


ONE = three_gsm8k().split("  - id: b")[0]
# each run: its suite, its flags and its environment beyond empty caches
RUNS = {"rebuild": (three_gsm8k(), ["--cold-engines", "rebuild"], {}),
        "keep": (three_gsm8k(), [], {}),                      # CPU: `auto` keeps
        "never-hits": (ONE, ["--cold-engines", "rebuild"], {"JITCACHE_NEVER_HITS": "1"}),
        "layered": (ONE, ["--cold-engines", "rebuild"], {"JITCACHE_LAYERED": "1"})}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every run of this module, side by side (support.side_by_side: they judge starts,
    caches and records, never time), each with empty compile caches of its own of every
    kind the harness counts, and the test target loaded in every engine process:
    name -> (manifest, stderr, report.html)."""
    root = tmp_path_factory.mktemp("cold")
    variants, own_env = {}, {}
    for name, (suite_text, flags, env) in RUNS.items():
        (root / f"{name}.yaml").write_text(suite_text)
        variants[name] = [root / f"{name}.yaml", "--target", "jitcache", "--candidate", "v2",
                          "--baseline", "v2", *flags]
        own_env[name] = {**env, **{var: str(root / f"{name}-caches" / var.lower()) for var in
                                   ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                                    "VLLM_CACHE_ROOT")}}
    runs = run_variants(root, None, variants, own_env=own_env,
                        env={"MRBENCH_TARGET_MODULES": "support.jit_cache"})
    out = {}
    for name, r in runs.items():
        assert r.code == 0, r.err
        out[name] = (r.manifest, r.err, (r.path / "report.html").read_text())
    return out


def test_an_engine_that_compiled_at_start_is_measured_in_a_new_process(runs):
    manifest, err, html = runs["rebuild"]
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


def test_keep_measures_the_engine_that_compiled_and_records_it(runs):
    manifest, err, html = runs["keep"]                  # CPU: `auto` keeps
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


def test_a_rebuild_whose_start_writes_again_ends_rebuilding_for_the_run(runs):
    """A cache that never hits (or a tool that writes at every start): one rebuild shows it,
    and the run measures the rest as they start instead of paying a start twice each."""
    manifest, err, _ = runs["never-hits"]
    cand = manifest["resolved"]["a"]["candidate"]["engine_start"]
    base = manifest["resolved"]["a"]["baseline"]["engine_start"]
    assert cand["rebuilt_after"]["compile_cache_writes"] == {"triton": 1}
    assert cand["compile_cache_writes"] == {"triton": 1}
    assert base["compile_cache_writes"] == {"triton": 1} and "rebuilt_after" not in base
    assert "no more rebuilds in this run" in err
    assert err.count("starting it again in a new process") == 1


def test_a_cache_that_fills_in_layers_is_rebuilt_until_a_start_loads_everything(runs):
    """The start that compiled wrote two files, its rebuild still one (a kernel the loading
    path builds): that rebuild is started once more, and the start measured wrote nothing."""
    manifest, err, _ = runs["layered"]
    cand = manifest["resolved"]["a"]["candidate"]
    start = cand["engine_start"]
    assert start["compile_cache_writes"] == {} and cand["compiled_in_process"] == []
    assert start["rebuilt_after"]["compile_cache_writes"] == {"triton": 1}
    assert start["rebuilt_after"]["rebuilt_after"]["compile_cache_writes"] == {"triton": 2}
    assert "compiled fewer kernels, but some" in err and "wrote again" not in err
    base = manifest["resolved"]["a"]["baseline"]
    assert base["engine_start"]["compile_cache_writes"] == {} and base["compiled_in_process"] == []
