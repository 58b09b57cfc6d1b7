"""The engine threads' time off their CPUs (canary.off_cpu_share, compare.machine_busy): on a
CPU engine a step thread is on its CPU for the whole step, so a baseline whose thread was
off-CPU for a quarter of its steps ran on a machine busy with other work, and the latency
checks say "not measured" instead of judging the machine. A candidate off-CPU alone may be
its own blocking, so it is judged; on a GPU, where a step may wait for the device, the
reading is not used."""
import numpy as np
import pytest

from mrbench.contract import SideResult
from mrbench.harness.checks.compare import compare, machine_busy
from mrbench.harness.measure.canary import MAX_OFF_CPU, off_cpu_share
from mrbench.harness.record.suite import Thresholds

TH = Thresholds(latency_rel=0.20, median_rel=0.20,
                latency_metrics=["p99_step_ms", "median_step_ms"])


def _side(seed: int, slower: float = 1.0, off: float = 0.0, device: str = "cpu",
          pos: int = 0) -> SideResult:
    """12 waves of 100 steps; `off` of each step's wall time spent off the CPU."""
    rng = np.random.default_rng(seed)
    rows = []
    for w in range(12):
        for d in rng.lognormal(np.log(6.0), 0.1, size=100) * slower:
            rows.append(dict(wave=w, wave_pos=(w + pos) % 2, duration_ms=float(d),
                             cpu_ms=float(d * (1 - off))))
    return SideResult(steps=rows, resolved=dict(target="bundled", device=device))


def _latency(base: SideResult, cand: SideResult) -> dict:
    return {c.metric: c for c in compare("w", base, cand, TH) if c.metric in TH.latency_metrics}


def test_the_share_is_off_cpu_time_over_wall_time_of_the_timed_steps():
    side = _side(0, off=0.3)
    assert off_cpu_share(side.steps) == pytest.approx(0.3)
    side.steps.append(dict(wave=None, duration_ms=1e6, cpu_ms=0.0))    # warmup: not timed
    assert off_cpu_share(side.steps) == pytest.approx(0.3)
    assert off_cpu_share([dict(wave=0, duration_ms=5.0)]) is None      # no thread clock


def test_a_real_slowdown_on_a_quiet_machine_is_judged():
    checks = _latency(_side(0), _side(1, slower=1.5, pos=1))
    assert all(c.verdict == "regression" for c in checks.values()), checks
    assert machine_busy(_side(0), _side(1)) == (False, "")


def test_a_baseline_off_cpu_for_a_quarter_of_its_steps_is_not_measured():
    base = _side(0, off=MAX_OFF_CPU + 0.1)
    for cand in (_side(1, slower=1.5, pos=1), _side(1, pos=1, off=0.3)):
        for c in _latency(base, cand).values():
            assert c.verdict == "info" and c.note.startswith("not measured: the engine "
                                                             "threads were off their CPUs"), c
            assert "35.0% (baseline)" in c.note


def test_a_candidate_off_cpu_alone_is_judged_and_said():
    checks = _latency(_side(0), _side(1, slower=1.5, off=0.4, pos=1))
    for c in checks.values():
        assert c.verdict == "regression" and "possibly the candidate's own waiting" in c.note


def test_on_a_gpu_time_off_the_cpu_is_waiting_for_the_device_and_not_read():
    base = _side(0, off=0.6, device="cuda:0")
    cand = _side(1, slower=1.5, off=0.6, device="cuda:0", pos=1)
    assert machine_busy(base, cand) == (False, "")
    assert all(c.verdict == "regression" for c in _latency(base, cand).values())
