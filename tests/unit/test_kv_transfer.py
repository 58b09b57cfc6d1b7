"""PD through NIXL, without an engine: the per-rank transfer records merged per request,
the check that every request's KV arrived, the connector's engine arguments and the
refusals of its faults where no NIXL pair runs."""
from __future__ import annotations

import importlib.util
import socket
from collections import Counter
from types import SimpleNamespace

import pytest

from mrbench.contract import BadInput, EngineOptions
from mrbench.harness.checks.kv_transfer import kv_transfer_check
from mrbench.harness.record.metrics import LATENCY, LATENCY_METRICS
from mrbench.harness.run.targets.base import SideSpec
from mrbench.harness.run.targets.vllm.engine_args import pd_engine_kwargs
from mrbench.harness.run.targets.vllm.environment import (
    MIN_KV_CACHE_BYTES,
    NIXL_KV_HEADROOM,
    engine_env,
    nixl_kv_cache_bytes,
    pd_worker_binding,
    runners_in_workers,
)
from mrbench.harness.run.targets.vllm.pd_nixl import (
    Transfers,
    side_channel_port,
    stalled_error,
)


def _rec(rid, t0, t1, read=True, failed=False, blocks=3, nbytes=300):
    return dict(request_id=rid, t_start=t0, t_end=t1, read=read, failed=failed,
                blocks=blocks, bytes=nbytes, waiting=False)


def test_a_request_arrived_only_where_every_rank_read_it():
    t = Transfers()
    t.take([[_rec("0-ab", 1.0, 1.5), _rec("1-cd", 1.0, 1.2)],
            [_rec("0-ab", 1.0, 1.7), _rec("1-cd", 1.0, 1.1, read=False)]])
    a, b = t.by_request["0"], t.by_request["1"]
    assert a.arrived and a.seconds == pytest.approx(0.7) and a.bytes == 600   # slowest rank
    assert not b.arrived                        # one rank reported it with no READ posted
    totals: Counter[str] = Counter()
    t.count("0", totals), t.count("1", totals), t.count("2", totals)   # 2: never recorded
    assert totals == {"pd_kv_transfers": 3, "pd_kv_bytes": 900, "pd_kv_missing": 2}


def test_a_request_still_waiting_is_not_taken_as_done():
    t = Transfers()
    t.take([[dict(_rec("5-x", 1.0, None), waiting=True)]])
    assert "5" not in t.by_request


def _side(rows):
    return SimpleNamespace(requests=rows)


def test_missing_kv_is_a_regression_naming_the_requests():
    ok = [dict(req_index=i, kv_arrived=True) for i in range(4)]
    bad = [dict(req_index=i, kv_arrived=i not in (1, 3)) for i in range(4)]
    bundled = _side([dict(req_index=i) for i in range(4)])       # no NIXL: not judged
    c = kv_transfer_check("gsm8k-pd", bundled, _side(bad))
    assert c.verdict.value == "regression" and c.candidate == 2 and c.baseline is None
    assert "2 of 4 requests (req 1, 3)" in c.note
    c = kv_transfer_check("gsm8k-pd", bundled, _side(ok))
    assert c.verdict.value == "pass" and c.candidate == 0
    assert kv_transfer_check("gsm8k", bundled, bundled) is None   # measured nothing: no check


def test_a_stalled_transfer_names_side_and_requests():
    e = stalled_error(["12-aa", "3-bb"], "vllm:v1", 61.0)
    assert "vllm:v1" in str(e) and "request(s) 3, 12" in str(e) and "stalled" in str(e)


def test_kv_handoff_latency_is_judged_only_where_a_suite_names_it():
    assert "p99_kv_handoff_ms" in LATENCY and "p99_kv_handoff_ms" not in LATENCY_METRICS
    assert LATENCY["p99_kv_handoff_ms"].column == "kv_handoff_ms"


PD = EngineOptions(pd_disagg=True)


def test_nixl_engines_get_the_measuring_connector_and_workers_of_their_own():
    side = SideSpec("v1", target="vllm", kv_connector="nixl")
    assert runners_in_workers(side, PD)
    assert not runners_in_workers(SideSpec("v1", target="vllm"), PD)   # example: one process
    kw = pd_engine_kwargs(dict(max_num_batched_tokens=128, max_model_len=512), "kv_producer",
                          None, "nixl", "cpu")
    cfg = kw["kv_transfer_config"]
    assert cfg["kv_connector"] == "MrbenchNixlConnector" and cfg["kv_buffer_device"] == "cpu"
    assert cfg["kv_connector_module_path"].endswith(".kv_nixl")
    assert "enable_chunked_prefill" not in kw     # NIXL moves a finished request's blocks


def test_a_cpu_pair_in_workers_splits_the_cpus_between_its_engines(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda _: {0, 1, 2, 3})
    side = SideSpec("v1", target="vllm", kv_connector="nixl")
    assert (pd_worker_binding(side, PD, 0), pd_worker_binding(side, PD, 1)) == ("0,1", "2,3")
    assert pd_worker_binding(SideSpec("v1", target="vllm"), PD, 0) is None


def test_a_connector_fault_reaches_the_workers_through_the_engine_environment():
    side = SideSpec("v1", target="vllm", kv_connector="nixl", faults=("kv-transfer-dropped",))
    assert engine_env(side)["MRBENCH_KV_FAULT"] == "kv-transfer-dropped"
    assert "MRBENCH_KV_FAULT" not in engine_env(SideSpec("v1", target="vllm"))


def test_a_connector_fault_without_nixl_is_one_line_of_bad_input():
    pytest.importorskip("vllm")
    from mrbench.harness.run.targets.vllm import VllmTarget
    with pytest.raises(BadInput, match="needs --kv-connector nixl"):
        VllmTarget().validate(SideSpec("v1", target="vllm", faults=("kv-transfer-dropped",)))


def test_a_request_waiting_for_its_kv_past_the_limit_ends_the_pass(monkeypatch):
    """Rounds that only wait for KV are not the "scheduled nothing" stop while within
    KV_WAIT_S; past it the wait is a recorded failure naming the request (the real stall,
    `--fault kv-transfer-stalled`, is docs/vllm-gpu.md's "PD through NIXL")."""
    from mrbench.harness.run.targets.vllm import pd_nixl
    waiting = SimpleNamespace(status=SimpleNamespace(name=pd_nixl.WAITING))
    core = SimpleNamespace(scheduler=SimpleNamespace(requests={"7-zz": waiting}))
    clock = iter([100.0, 100.5, 200.0])
    monkeypatch.setattr(pd_nixl.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(pd_nixl.time, "sleep", lambda s: None)
    w = pd_nixl.KvWait("vllm:v1")
    assert w.waiting(False, core) and w.waiting(False, core)
    assert not w.waiting(True, core)                  # a round that ran resets the wait
    w.since = 100.0
    with pytest.raises(RuntimeError, match=r"request\(s\) 7 .*MRBENCH_KV_WAIT_S"):
        w.waiting(False, core)


def test_an_engine_gets_the_same_side_channel_port_at_every_start():
    """vLLM hashes the side channel's port into its compile cache key: a new port each start
    compiled the engine again (pd_nixl.side_channel_port)."""
    with side_channel_port("candidate/decode") as first:
        pass
    with side_channel_port("candidate/decode") as again:
        pass
    with side_channel_port("candidate/prefill") as other:
        pass
    assert first == again and other != first


def test_two_engines_starting_at_once_with_one_name_take_two_ports():
    with side_channel_port("aa/decode") as a, side_channel_port("aa/decode") as b:
        assert a != b


def test_a_port_in_use_is_passed_over():
    with side_channel_port("busy/decode") as usual:
        pass
    with socket.socket() as s:
        s.bind(("127.0.0.1", usual))
        s.listen()
        with side_channel_port("busy/decode") as port:
            assert port != usual


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM")
def test_vllm_hashes_the_side_channel_port_into_its_compile_key(monkeypatch):
    """Why the port must stay the same: if a vLLM release stops hashing it, any free port
    would do again."""
    envs = pytest.importorskip("vllm.envs")
    if not hasattr(envs, "compile_factors"):
        pytest.skip("this vLLM has no compile_factors")
    if hasattr(envs, "disable_envs_cache"):
        envs.disable_envs_cache()
    monkeypatch.setenv("VLLM_NIXL_SIDE_CHANNEL_PORT", "20001")
    a = envs.compile_factors()
    monkeypatch.setenv("VLLM_NIXL_SIDE_CHANNEL_PORT", "20002")
    b = envs.compile_factors()
    assert a != b


def test_a_connector_call_is_timed_inside_the_transfer_range():
    """Both measuring connectors time their worker calls through kv_timing: the call's ops
    land in the transfer's profiler range, and its seconds are taken once."""
    import time

    import torch

    from mrbench.harness.measure.phases import TRANSFER_LABEL
    from mrbench.harness.run.targets.vllm import kv_timing
    kv_timing.take()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = kv_timing.timed(lambda t: (time.sleep(0.01), t + 1)[1], torch.ones(2))
    assert out.tolist() == [2.0, 2.0]
    assert any(e.name == TRANSFER_LABEL for e in prof.events())
    assert kv_timing.take() >= 0.01 and kv_timing.take() == 0.0


def test_a_nixl_engine_registers_a_bench_sized_kv_cache_not_its_whole_share():
    """A PD engine under NIXL gets at most NIXL_KV_HEADROOM times every slot at full
    context (what it registers with NIXL at start), never more than its planned share and
    never under the floor every planned cache has."""
    least = 1 << 30                          # llama-1b: 4 slots x 8192 tokens x 32 KiB
    assert nixl_kv_cache_bytes(40 << 30, least) == NIXL_KV_HEADROOM * least
    assert nixl_kv_cache_bytes(300 << 20, least) == 300 << 20          # the share is less
    assert nixl_kv_cache_bytes(40 << 30, 1 << 20) == MIN_KV_CACHE_BYTES
