"""The slow-step ruler's device spin on a CUDA side (harness/run/targets/vllm/ruler.py): the
device is kept busy for PCT % of the step, behind the step's kernels, and the profiled pass
queues nothing. Skips without CUDA."""
import time

import pytest
import torch

from mrbench.harness.run.targets.vllm import ruler as vllm_ruler

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_the_device_spin_lasts_pct_of_the_step_on_the_gpu():
    ruler = vllm_ruler.StepRuler(50, "cuda")
    assert ruler.cycles_per_ms and ruler.cycles_per_ms > 1e5      # a GHz clock: > 1e5/ms
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.02:                         # a 20 ms "step"
        pass
    start.record()
    added = ruler.spin_after(t0)
    end.record()
    end.synchronize()
    # the device was kept busy about as long as the host spun (10 ms for 50 % of 20 ms);
    # loose bounds: a clock that moved between calibration and use is not a failure here
    assert added >= 10.0
    assert 0.5 * added <= start.elapsed_time(end) <= 2.0 * added + 5.0
    assert ruler.device_spins == 1
    assert ruler.record()["device_cycles_per_ms"] > 0


def test_the_profiled_pass_queues_no_device_spin():
    ruler = vllm_ruler.StepRuler(50, "cuda")
    ruler.spin_after(time.perf_counter() - 0.002, on_device=False)
    assert ruler.device_spins == 0 and ruler.slowed_steps == 1
