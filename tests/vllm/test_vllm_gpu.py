"""Real vLLM: Model Runner V2 against V1 on a GPU. Skipped without CUDA and vLLM.

These are the acceptance runs of the vllm target on the GPU: smoke and quick pass clean, and
vLLM PR 40654's bug put back into V2 (`--fault seq-lens-sync`: `prepare_inputs` reads the
device `seq_lens` back every step) fails `syncs_per_step`, and vLLM's own sync checker's
warnings with it. Every engine start costs tens of seconds, so each run is made once per
session: by the fixtures here, or beforehand by scripts/gpu/vllm_acceptance.sh, whose run
directories `MRBENCH_VLLM_GPU_RUNS` points at (DIR/smoke-clean, DIR/smoke-fault,
DIR/quick-clean, each with the run's stderr beside it).
"""
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from mrbench.harness.cli import main
from mrbench.harness.measure.phases import HOT_PHASES
from mrbench.harness.run.targets.vllm.environment import installed_version


def _cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


pytestmark = pytest.mark.skipif(
    installed_version() is None or not _cuda(),
    reason="needs vLLM and a CUDA GPU (vLLM's Model Runner V2 is GPU-only); "
           "run scripts/gpu/vllm_acceptance.sh on a GPU machine")

RUNS = {
    "smoke-clean": ["smoke"],
    "smoke-fault": ["smoke", "--fault", "seq-lens-sync", "--vllm-sync-check", "warn"],
    "quick-clean": ["quick", "--vllm-sync-check", "warn"],
    "spec-eagle": ["spec-eagle"],
    "pd-clean": ["pd", "--vllm-sync-check", "warn"],
    "tp2-clean": ["smoke", "--engine-arg", "tensor_parallel_size=2"],
    "tp2-fault": ["smoke", "--engine-arg", "tensor_parallel_size=2", "--fault", "seq-lens-sync"],
    "pd-eagle": ["pd-eagle"],
    "pd2-clean": ["pd", "--pd-gpus", "0,1"],
    "pd2-eagle": ["pd-eagle", "--pd-gpus", "0,1"],
}
TWO_GPUS = ("tp2-clean", "tp2-fault", "pd2-clean", "pd2-eagle")


class Run:
    def __init__(self, path: Path, stderr: str) -> None:
        self.path, self.stderr = path, stderr
        self.summary = json.loads((path / "summary.json").read_text())
        self.manifest = json.loads((path / "manifest.json").read_text())

    def check(self, workload: str, metric: str) -> dict:
        return next(c for c in self.summary["checks"]
                    if c["workload"] == workload and c["metric"] == metric)

    def resolved(self, workload: str, side: str) -> dict:
        return self.manifest["resolved"][workload][side]

    def profile(self) -> pd.DataFrame:
        return pd.read_csv(self.path / "profile.csv")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    made = os.environ.get("MRBENCH_VLLM_GPU_RUNS")
    cache: dict[str, Run] = {}

    def get(name: str) -> Run:
        if name not in cache:
            if made:
                if not (Path(made) / name / "summary.json").is_file():
                    pytest.skip(f"{made}/{name} was not made (scripts/gpu/vllm_acceptance.sh)")
                err = Path(made) / f"{name}.stderr"
                cache[name] = Run(Path(made) / name, err.read_text() if err.is_file() else "")
            else:
                import contextlib
                import io

                import torch
                if name in TWO_GPUS and torch.cuda.device_count() < 2:
                    pytest.skip(f"{name} needs two GPUs")
                out = tmp_path_factory.mktemp("vllm-gpu") / name
                buf = io.StringIO()
                with contextlib.redirect_stderr(buf):
                    main(["run", *RUNS[name], "--target", "vllm", "--device", "cuda",
                          "--candidate", "v2", "--baseline", "v1", "--out", str(out)])
                cache[name] = Run(out, buf.getvalue())
        return cache[name]
    return get


def test_smoke_v2_against_v1_passes_clean(runs):
    r = runs("smoke-clean")
    assert r.summary["verdict"] == "pass", (r.summary["failures"],
                                            [c for c in r.summary["checks"]
                                             if c["verdict"] != "pass" and c["verdict"] != "info"])
    cand, base = r.resolved("gsm8k", "candidate"), r.resolved("gsm8k", "baseline")
    assert cand["runner_class"] == "vllm.v1.worker.gpu.model_runner.GPUModelRunner"
    assert base["runner_class"].endswith("gpu_model_runner.GPUModelRunner")
    assert (cand["runner"], base["runner"]) == ("v2", "v1")
    assert r.check("gsm8k", "token_agreement")["candidate"] == 1.0


def test_both_engines_share_the_gpu(runs):
    """Both sides are resident at once (ABBA), so each asked vLLM for half of 0.85."""
    r = runs("smoke-clean")
    for side in ("baseline", "candidate"):
        kv = r.resolved("gsm8k", side)["kv_cache"]
        assert kv["gpu_memory_utilization"] == pytest.approx(0.425)
        assert kv["num_gpu_blocks"] and kv["num_gpu_blocks"] > 0


def test_every_hot_phase_ran_on_both_sides_and_v2_waits_only_for_its_output(runs):
    """The harness's own phase ranges attached to V2 and V1: every hot phase ran in every
    profiled step, so V2's zero hot syncs is a measurement, not the absence of labels; the
    one wait V2 makes on purpose (its output copy's event) is in the output phase."""
    r = runs("smoke-clean")
    prof = r.profile()
    for side, g in prof.groupby("side"):
        assert (g["ran_prepare"] > 0).mean() > 0.8, side      # (a step may only collect)
        for p in HOT_PHASES:
            assert g[f"ran_{p}"].sum() > 0 and g[f"events_{p}"].sum() > 0, (side, p)
    v2 = prof[prof.side == "candidate"]
    assert v2["syncs_hot"].sum() == 0
    assert v2["cudaEventSynchronize"].sum() > 0 and v2["syncs_output"].sum() > 0
    sync = r.check("gsm8k", "syncs_per_step")
    assert sync["verdict"] == "pass" and sync["candidate"] == 0
    probe = r.resolved("gsm8k", "candidate")["phase_probe"]
    assert not probe["missing"] and set(probe["attached"]) >= set(HOT_PHASES)


def test_the_40654_reinjection_fails_syncs_per_step_and_vllms_own_checker(runs):
    r = runs("smoke-fault")
    assert r.summary["verdict"] == "regression"
    sync = r.check("gsm8k", "syncs_per_step")
    assert sync["verdict"] == "regression" and sync["candidate"] >= 0.8
    prof = r.profile()
    v2 = prof[prof.side == "candidate"]
    assert (v2["syncs_prepare"] >= 1).mean() > 0.8    # (nearly) every step, in prepare
    assert v2["syncs_prepare"].sum() == v2["syncs_hot"].sum()
    warn = r.check("gsm8k", "sync_check_warnings")
    assert warn["verdict"] == "regression" and warn["candidate"] > 0
    patches = r.resolved("gsm8k", "candidate")["fault_patches"]
    assert patches and patches[0]["pr"] == 40654
    # the fault changed what the runner computes from, not what it outputs
    assert r.check("gsm8k", "token_agreement")["verdict"] == "pass"


def test_quick_passes_clean_and_says_what_it_could_not_run(runs):
    r = runs("quick-clean")
    assert r.summary["verdict"] == "pass", r.summary["failures"]
    warn = r.check("gsm8k", "sync_check_warnings")
    assert warn["verdict"] == "pass" and warn["candidate"] == 0
    reasons = {u["workload"]: u["reason"] for u in r.summary["unsupported"]}
    assert "ngram" in reasons["spec.k2-ngram-b4"] and "eagle" in reasons["spec.k2-ngram-b4"]
    assert "spec.k2-eagle-b4" not in reasons                 # V2's proposer runs
    # V2's host mirror vs its device truth, after every profiled step, k = 0 and k = 2
    for wl in ("gsm8k", "spec.k2-eagle-b4"):
        audit = r.check(wl, "state_audit_violations")
        assert audit["verdict"] == "pass" and audit["candidate"] == 0, audit
    assert "gsm8k-pd" not in reasons and "trace-pd" not in reasons   # the PD pair runs
    assert "ngram" in reasons["warmup.k1-ngram"]
    assert "warmup.k0" not in reasons and "warmup.k1-eagle" not in reasons


def _classes(run: "Run", workload: str, side: str, phase: str) -> set[str]:
    d = pd.read_csv(run.path / "dispatch.csv")
    d = d[(d.workload == workload) & (d.side == side) & (d.phase == phase)]
    return set(d["kind"])


def test_vllm_warmup_coverage_is_judged_and_clean_v2_warms_every_class_it_serves(runs):
    """What each runner's warmup ran, read in the engine process: V2's warmup_kernels ran a
    prefill (mixed) and a uniform decode of 1 + k, and every class V2's serving used was
    warmed, on every workload of the clean quick run. V1's (its dummy runs) is the baseline
    figure."""
    r = runs("quick-clean")
    for wl, q in (("gsm8k", 1), ("warmup.k0", 1), ("warmup.k1-eagle", 2),
                  ("spec.k2-eagle-b4", 3)):
        check = r.check(wl, "unwarmed_dispatch")
        assert check["verdict"] == "pass" and check["candidate"] == 0, check
        assert check["baseline"] is not None, check              # V1's was read too
        warm = _classes(r, wl, "candidate", "warmup")
        assert {"mixed", f"uniform_decode(q={q})"} <= warm, (wl, warm)
        assert _classes(r, wl, "candidate", "serve") <= warm
        assert _classes(r, wl, "baseline", "warmup")             # V1's dummy runs
    assert _classes(r, "gsm8k", "candidate", "dummy")       # V2's profile run: listed only


def test_the_40746_reinjection_leaves_the_prefill_path_unwarmed(runs):
    """`mrbench faults warmup-eagle --fault warmup-short-prefill`: vLLM PR 40746 put back
    into V2's warmup_kernels (2-token dummy prompts). Clean, k = 1 passes; with the fault the
    warmup's prefill is a uniform decode of 2, so the first real prefill runs a class warmup
    never ran, and unwarmed_dispatch catches it."""
    made = os.environ.get("MRBENCH_VLLM_GPU_RUNS")
    root = Path(made or "") / "warmup-faults"
    if not made or not (root / "faults.json").is_file():
        pytest.skip("warmup-faults was not made (scripts/gpu/vllm_acceptance.sh ... warmup)")
    res = json.loads((root / "faults.json").read_text())
    assert res["clean"]["verdict"] == "pass" and res["clean"]["false_alarms"] == 0, res["clean"]
    assert res["faults"]["warmup-short-prefill"]["by"] == ["warmup.k1-eagle/unwarmed_dispatch"]
    clean, fault = Run(root / "clean", ""), Run(root / "warmup-short-prefill", "")
    assert "mixed" in _classes(clean, "warmup.k1-eagle", "candidate", "warmup")
    k1 = fault.check("warmup.k1-eagle", "unwarmed_dispatch")
    assert k1["verdict"] == "regression" and k1["candidate"] == 1 and k1["baseline"] == 0, k1
    assert "never warmed: mixed" in k1["note"]
    assert "mixed" not in _classes(fault, "warmup.k1-eagle", "candidate", "warmup")
    patches = fault.resolved("warmup.k1-eagle", "candidate")["fault_patches"]
    assert patches and patches[0]["pr"] == 40746
    assert fault.check("warmup.k1-eagle", "token_agreement")["verdict"] == "pass"


def test_progress_lines_name_workload_side_and_engine_start(runs):
    err = runs("quick-clean").stderr
    for side, runner in (("candidate", "v2"), ("baseline", "v1")):
        assert f"gsm8k / {side} ({runner}): engine ready in" in err
        assert f"gsm8k / {side} ({runner}): done in" in err
    assert "unsupported here" in err and "verdict pass" in err


def test_report_header_shows_what_ran(runs):
    html = (runs("smoke-clean").path / "report.html").read_text()
    assert 'id="what-ran"' in html and "GPUModelRunner" in html
    assert "vLLM " + installed_version() in html
    assert "<details>" in html


def test_v2_speculates_with_the_bundled_eagle_head(runs):
    """k = 2 and 4 with runner_impl/assets/gsm8k-tiny-eagle, V2 against V1: drafts are
    accepted (vLLM's own counters), greedy tokens agree, and the pass is clean."""
    r = runs("spec-eagle")
    assert r.summary["verdict"] == "pass", (r.summary["failures"], [
        c for c in r.summary["checks"] if c["verdict"] not in ("pass", "info")])
    for k in (2, 4):
        wl = f"spec.k{k}-eagle-b4"
        al = r.check(wl, "mean_acceptance_length")
        assert al["candidate"] > 1.3 and al["baseline"] > 1.3, al
        m = r.summary["metrics"][wl]["candidate"]
        assert len(m["spec_decode_per_position_acceptance_rates"]) == k
        assert r.check(wl, "token_agreement")["verdict"] == "pass"
        cand = r.resolved(wl, "candidate")
        assert cand["engine"]["speculative_method"] == "eagle"
        assert cand["runner_class"].endswith("gpu.model_runner.GPUModelRunner")


def test_the_vllm_fault_matrix_catches_mirror_drift_and_wasteful_counting():
    """`mrbench faults quick --target vllm` with vLLM PRs 42202 and 38372 put back into V2:
    the clean run passes, the drifting mirror fails the state audit, the extra counting ops
    fail the op counts against this GPU build's stored reference."""
    made = os.environ.get("MRBENCH_VLLM_GPU_RUNS")
    path = Path(made or "") / "faults-quick" / "faults.json"
    if not made or not path.is_file():
        pytest.skip("faults-quick was not made (scripts/gpu/vllm_acceptance.sh ... matrix)")
    res = json.loads(path.read_text())
    assert res["clean"]["verdict"] == "pass" and res["clean"]["false_alarms"] == 0, res["clean"]
    assert "spec.k2-eagle-b4/state_audit_violations" in res["faults"]["mirror-increment"]["by"]
    assert "spec.k2-eagle-b4/ops_vs_reference" in res["faults"]["accept-count-cat-argmax"]["by"]


def test_pd_on_vllm_v2_against_v1_passes_clean_through_the_kv_connector(runs):
    """`run pd`: GSM8K and a Mooncake replay through two vLLM engines per side (a prefill
    engine and a decode engine joined by vLLM's example KV connector), V2 against V1. The
    decode engines loaded the prompts' KV (counted per request), greedy tokens and accuracy
    agree, V2 makes no hot-path sync on either engine (the connector's copies count against
    its own kv_transfer phase), and the state audit holds on both V2 engines."""
    r = runs("pd-clean")
    assert r.summary["verdict"] == "pass", (r.summary["failures"], [
        c for c in r.summary["checks"] if c["verdict"] not in ("pass", "info")])
    assert not r.summary["unsupported"]
    for wl in ("gsm8k-pd", "trace-pd"):
        assert r.check(wl, "token_agreement")["verdict"] == "pass"
        audit = r.check(wl, "state_audit_violations")
        assert audit["verdict"] == "pass" and audit["candidate"] == 0, audit
        for side in ("candidate", "baseline"):
            res = r.resolved(wl, side)
            assert res["engine"]["pd_disagg"] is True
            roles = {n: i["role"] for n, i in res["pd"]["instances"].items()}
            assert roles == {"prefill": "kv_producer", "decode": "kv_consumer"}
            kv = res["pd"]["instances"]["decode"]["kv_cache"]
            assert kv["gpu_memory_utilization"] == pytest.approx(0.2125)   # 0.85 / 4 engines
            m = r.summary["metrics"][wl][side]
            assert m["pd_kv_loaded_tokens"] > 0 and m["pd_requests"] > 0, m
    assert r.check("gsm8k-pd", "accuracy_strict")["verdict"] == "pass"
    prof = r.profile()
    v2 = prof[prof.side == "candidate"]
    assert set(v2["instance"].dropna()) == {"prefill", "decode"}   # (a step may only collect)
    assert v2["syncs_hot"].sum() == 0 and v2["ran_kv_transfer"].sum() > 0
    req = pd.read_csv(r.path / "requests.csv")
    pdr = req[req.workload == "gsm8k-pd"]
    assert (pdr["prefill_ms"] > 0).all() and (pdr["kv_handoff_ms"] > 0).mean() > 0.8
    assert (pdr["prefill_ms"] < pdr["ttft_ms"]).all()        # TTFT = prefill + hand-off + ...


def test_tensor_parallel_measures_every_rank_and_v2_passes_clean(runs):
    """`smoke` at tensor_parallel_size=2 (two GPUs): each rank's runner is labelled,
    profiled and counted in its own worker process, so every count is per rank, and a rank
    that measured nothing would be "not measured". Clean V2 makes no hot sync on either
    rank (V1: its one prepare-phase wait on each)."""
    r = runs("tp2-clean")
    assert r.summary["verdict"] == "pass", [c for c in r.summary["checks"]
                                            if c["verdict"] not in ("pass", "info")]
    for side in ("candidate", "baseline"):
        tp = r.resolved("gsm8k", side)["tensor_parallel"]
        assert tp["size"] == 2 and [k["rank"] for k in tp["ranks"]] == [0, 1]
        assert len({k["pid"] for k in tp["ranks"]}) == 2       # a process per rank
        for k in tp["ranks"]:
            assert not k["missing"] and set(k["attached"]) >= set(HOT_PHASES), k
    prof = r.profile()
    for (side, rank), g in prof.groupby(["side", "rank"]):
        for p in HOT_PHASES:
            assert g[f"ran_{p}"].sum() > 0, (side, rank, p)
    for rank in (0, 1):
        sync = r.check("gsm8k", f"syncs_per_step[rank{rank}]")
        assert sync["verdict"] == "pass" and sync["candidate"] == 0, sync
        assert r.check("gsm8k", f"ops_per_step[rank{rank}]")["candidate"] > 0
    assert r.check("gsm8k", "token_agreement")["candidate"] == 1.0


def test_the_40654_reinjection_is_caught_on_every_tensor_parallel_rank(runs):
    """`--fault seq-lens-sync` at tensor_parallel_size=2: the patch reaches every rank's
    worker process, and each rank's check fails on its own prepare-phase sync."""
    r = runs("tp2-fault")
    assert r.summary["verdict"] == "regression"
    prof = r.profile()
    v2 = prof[prof.side == "candidate"]
    for rank in (0, 1):
        sync = r.check("gsm8k", f"syncs_per_step[rank{rank}]")
        assert sync["verdict"] == "regression" and sync["candidate"] >= 0.8, sync
        mine = v2[v2["rank"] == rank]
        assert (mine["syncs_prepare"] >= 1).mean() > 0.8
        assert mine["syncs_prepare"].sum() == mine["syncs_hot"].sum()
    assert r.check("gsm8k", "token_agreement")["verdict"] == "pass"


def _runner_processes(r: Run, workload: str, side: str) -> dict[str, dict]:
    """Each engine's one worker of a PD pair whose runners run in workers."""
    procs = r.resolved(workload, side)["runner_processes"]
    assert set(procs) == {"prefill", "decode"} and all(p["size"] == 1 for p in procs.values())
    return {n: p["ranks"][0] for n, p in procs.items()}


def test_v1_with_eagle_runs_as_a_pd_pair_with_a_process_per_runner(runs):
    """`pd-eagle`: a PD pair with EAGLE k = 2 runs each engine's runner in a worker of its
    own on both sides; V1's pair, which failed with both runners in one process, runs, and
    both runners draft and accept alike on the same tokens."""
    r = runs("pd-eagle")
    assert r.summary["verdict"] == "pass", (r.summary["failures"],
                                            [c for c in r.summary["checks"]
                                             if c["verdict"] not in ("pass", "info")])
    wl = "gsm8k-pd-eagle"
    for side in ("candidate", "baseline"):
        workers = _runner_processes(r, wl, side)
        assert len({w["pid"] for w in workers.values()}) == 2
        for w in workers.values():
            assert not w["missing"] and set(w["attached"]) >= set(HOT_PHASES), w
    al = r.check(wl, "mean_acceptance_length")
    assert al["baseline"] > 1 and al["candidate"] > 1
    assert r.check(wl, "token_agreement")["candidate"] == 1.0
    assert r.check(wl, "syncs_per_step")["candidate"] == 0
    prof = r.profile()
    assert set(prof[prof.side == "baseline"]["instance"]) == {"prefill", "decode"}


@pytest.mark.parametrize("name, workloads", [("pd2-clean", ("gsm8k-pd", "trace-pd")),
                                             ("pd2-eagle", ("gsm8k-pd-eagle",))])
def test_a_pd_pair_across_two_gpus_moves_kv_between_them(runs, name, workloads):
    """`--pd-gpus 0,1`: every pair's prefill runner works on GPU 0 and its decode runner on
    GPU 1 (read back in each worker), the decode engine loads the prompts' KV the prefill
    engine stored, each request's hand-off is timed, and V2 against V1 passes clean."""
    r = runs(name)
    assert r.summary["verdict"] == "pass", (r.summary["failures"],
                                            [c for c in r.summary["checks"]
                                             if c["verdict"] not in ("pass", "info")])
    for wl in workloads:
        for side in ("candidate", "baseline"):
            workers = _runner_processes(r, wl, side)
            assert [workers[n]["cuda_visible_devices"] for n in ("prefill", "decode")] \
                == ["0", "1"], workers
            assert r.resolved(wl, side)["pd"]["gpus"] == [0, 1]
            m = r.summary["metrics"][wl][side]
            assert m["pd_requests"] > 0 and m["pd_kv_loaded_tokens"] > 0, m
        assert r.check(wl, "token_agreement")["candidate"] == 1.0
    req = pd.read_csv(r.path / "requests.csv")
    assert (req["kv_handoff_ms"] > 0).mean() > 0.5
