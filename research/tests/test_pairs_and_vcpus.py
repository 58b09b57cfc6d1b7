"""research/pairs_repooled.py judges a stored check's pairs with the gate's pooling;
research/vcpu_speed.py times a loop on each CPU, alone and beside a spin loop."""
import importlib.util
import os
from pathlib import Path


def _load(name: str):
    spec = importlib.util.spec_from_file_location(
        name, Path(__file__).resolve().parents[1] / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_stored_normal_ci_alarm_is_pooled_again_on_t():
    repooled = _load("pairs_repooled")
    check = {"bar": {"value": 0.02}, "pairs": [
        [-0.0480, 0.0627], [0.0774, 0.0631], [0.0485, 0.0621],
        [0.0449, 0.0277], [-0.0090, 0.0551], [0.0629, 0.0469]]}
    rel, p, verdict = repooled._repooled(check, pair_sd_rel=0.02, alpha=0.05)
    assert abs(rel - 0.0357) < 1e-3 and 0.05 < p < 0.1 and verdict == "pass"
    check["pairs"] = [[e + 0.05, s / 4] for e, s in check["pairs"]]
    assert repooled._repooled(check, pair_sd_rel=0.02, alpha=0.05)[2] == "regression"


def test_each_cpu_is_timed_and_the_spun_one_left_out():
    vcpu = _load("vcpu_speed")
    cpus = sorted(os.sched_getaffinity(0))
    got = vcpu.speeds(cpus, loop=2000, reps=3)
    assert sorted(got) == cpus and all(ms > 0 for ms in got.values())
    if len(cpus) > 1:
        spun = vcpu.speeds(cpus, loop=2000, reps=3, spin=cpus[-1])
        assert sorted(spun) == cpus[:-1]
    assert os.sched_getaffinity(0) == set(cpus)          # the pin is given back
