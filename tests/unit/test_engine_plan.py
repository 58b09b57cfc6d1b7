"""The engine plan: shapes shared across workloads, groups bounded by what fits the device
and the host, memory shares, and the serial plan as engines were always started."""
from dataclasses import replace

from mrbench.contract import EngineOptions
from mrbench.harness.run.engines import plan as engine_plan
from mrbench.harness.run.targets.base import Footprint, SideSpec

GiB = 1 << 30
SIDES = dict(baseline=SideSpec("v1"), candidate=SideSpec("v2"))


def key(sp: SideSpec, o: EngineOptions):
    return (sp, replace(o, gpu_memory_share=None))


def fp(device_gib: float, host_gib: float = 1.0):
    return lambda sp, o: Footprint(int(device_gib * GiB), int(host_gib * GiB))


WORKLOADS = [("gsm8k", EngineOptions(max_num_seqs=8)),
             ("gsm8k-pd", EngineOptions(max_num_seqs=4, pd_disagg=True)),
             ("trace-pd", EngineOptions(max_num_seqs=4, pd_disagg=True)),
             ("warmup.k0", EngineOptions(max_num_seqs=8)),
             ("sampled", EngineOptions(max_num_seqs=10))]


def test_workloads_with_one_shape_share_an_engine_per_side():
    p = engine_plan.plan(WORKLOADS, SIDES, key, fp(1), 0.85, 4, 80 * GiB, 512 * GiB)
    assert len(p.engines) == 6                       # 3 shapes x 2 sides
    served = {(e.side, e.workloads) for e in p.engines}
    assert ("baseline", ("gsm8k", "warmup.k0")) in served
    assert ("candidate", ("gsm8k-pd", "trace-pd")) in served
    assert len(p.groups) == 1 and p.group_of("sampled") == 0
    assert "6 engines (8 instances) in 1 start group, up to 4" in p.describe()


def test_shares_split_the_budget_by_instance_and_sum_to_it():
    p = engine_plan.plan(WORKLOADS, SIDES, key, fp(1), 0.8, 4, 80 * GiB, 512 * GiB)
    shares = {(e.side, e.workloads[0]): e.options.gpu_memory_share for e in p.engines}
    assert shares[("baseline", "gsm8k")] == 0.1                  # 0.8 / 8 instances
    assert shares[("baseline", "gsm8k-pd")] == 0.2               # a pair: two instances
    assert abs(sum(shares.values()) - 0.8) < 1e-6


def test_groups_close_when_the_device_is_full():
    # 10 GiB an instance on an 80 GiB device at 0.85 (68 GiB): 6 instances fit, not 8
    p = engine_plan.plan(WORKLOADS, SIDES, key, fp(10), 0.85, 4, 80 * GiB, 512 * GiB)
    assert [[e.workloads[0] for e in g.engines] for g in p.groups] == [
        ["gsm8k", "gsm8k", "gsm8k-pd", "gsm8k-pd"], ["sampled", "sampled"]]
    assert p.groups[1].engines[0].options.gpu_memory_share == 0.425   # two resident
    assert "what fits the device and the host" in p.why_groups


def test_the_host_memory_bounds_a_group_too():
    # 4 GiB of host an engine, a 16 GiB host (60 %: 9.6 GiB): two instances at once
    p = engine_plan.plan(WORKLOADS, SIDES, key, fp(1, host_gib=4), 0.85, 4, 80 * GiB,
                         16 * GiB)
    assert all(g.instances <= 2 or len(g.engines) == 2 for g in p.groups)
    assert len(p.groups) == 3


def test_one_start_at_a_time_keeps_each_shape_alone():
    p = engine_plan.plan(WORKLOADS, SIDES, key, fp(1), 0.85, 1, 80 * GiB, 512 * GiB)
    assert len(p.groups) == 3
    assert all(len({e.workloads for e in g.engines}) == 1 for g in p.groups)
    assert p.groups[0].engines[0].options.gpu_memory_share == 0.425   # as before planning


def test_an_unknown_footprint_or_device_keeps_each_shape_alone():
    unknown = engine_plan.plan(WORKLOADS, SIDES, key, lambda sp, o: None, 0.85, 4,
                               80 * GiB, 512 * GiB)
    no_gpu = engine_plan.plan(WORKLOADS, SIDES, key, fp(1), 0.85, 4, None, 512 * GiB)
    for p in (unknown, no_gpu):
        assert len(p.groups) == 3
        assert "unknown" in p.why_groups


def test_default_starts_at_once():
    assert engine_plan.default_starts_at_once({"cpu"}, cpus=16) == 1
    assert engine_plan.default_starts_at_once({"cuda"}, cpus=14) == 14
    assert engine_plan.default_starts_at_once({"cuda:1"}, cpus=64) == 16
    assert engine_plan.default_starts_at_once({"cuda"}, cpus=1) == 1


def test_the_plan_is_recorded_whole():
    d = engine_plan.plan(WORKLOADS, SIDES, key, fp(1), 0.85, 4, 80 * GiB, 512 * GiB).to_dict()
    assert d["starts_at_once"] == 4 and d["device_bytes"] == 80 * GiB
    e = d["groups"][0][0]
    assert e["footprint"] == dict(device=GiB, host=GiB) and e["workloads"]


def test_a_pd_pair_across_two_gpus_counts_each_engine_against_its_own_gpu():
    """`--pd-gpus 0,1`: a pair's prefill instance is on GPU 0 beside the run's other
    engines, its decode instance alone on GPU 1. Each GPU is its own budget, so a group that
    would not fit one GPU fits two, and a pair's engines take the smaller share of their two
    GPUs (each engine takes it whole: the target does not halve it across GPUs)."""
    one = engine_plan.plan(WORKLOADS, SIDES, key, fp(10), 0.85, 4, 80 * GiB, 512 * GiB)
    two = engine_plan.plan(WORKLOADS, SIDES, key, fp(10), 0.85, 4, 80 * GiB, 512 * GiB,
                           pd_gpus=(0, 1))
    assert len(one.groups) == 2                     # 8 instances of 10 GiB: not on one GPU
    assert len(two.groups) == 1                     # GPU 0: 6 instances, GPU 1: 2
    pd = {e.gpus for e in two.engines if e.options.pd_disagg}
    assert pd == {(0, 1)} and {e.gpus for e in two.engines if not e.options.pd_disagg} == {(0,)}
    shares = {(e.side, e.workloads[0]): e.options.gpu_memory_share for e in two.engines}
    assert shares[("baseline", "gsm8k")] == 0.1416          # GPU 0's six, rounded down
    assert shares[("baseline", "gsm8k-pd")] == 0.1416       # the smaller: GPU 0's
    on_gpu0 = sum(shares[k] for k in shares if k[1] != "gsm8k-pd") + 2 * shares[
        ("baseline", "gsm8k-pd")]
    assert on_gpu0 <= 0.85 + 1e-6
    assert "each PD pair's prefill on GPU 0, its decode on GPU 1" in two.describe()
    assert two.to_dict()["groups"][0][2]["gpus"] == [0, 1]


def test_pairs_alone_across_two_gpus_take_each_gpus_whole_budget():
    pairs = [w for w in WORKLOADS if w[1].pd_disagg]
    p = engine_plan.plan(pairs, SIDES, key, fp(1), 0.8, 4, 80 * GiB, 512 * GiB,
                         pd_gpus=(1, 0))
    assert [e.gpus for e in p.engines] == [(1, 0), (1, 0)]
    assert {e.options.gpu_memory_share for e in p.engines} == {0.4}      # two on each GPU
