"""`slow-step:PCT`, the latency ruler: parsed and validated like a fault, and on CPU it
busies the core for PCT % of the forward's own time, inside the forward call (so inside
the forward phase the harness profiles)."""
import pytest
import torch

from mrbench.runner_impl import slow_step as ss
from mrbench.runner_impl.errors import RunnerError
from mrbench.runner_impl.faults import FAULTS, FaultSet, slow_step_pct


def test_the_ruler_is_parsed_and_kept_out_of_the_historic_faults():
    fs = FaultSet(["slow-step:7.5", "seq-lens-sync"])
    assert fs.slow_step_pct == 7.5 and fs.names == {"seq-lens-sync"} and fs.any()
    assert "slow-step" not in FAULTS and not FaultSet().any()
    assert slow_step_pct("seq-lens-sync") is None
    for bad in ("slow-step", "slow-step:x", "slow-step:0", "slow-step:5000"):
        with pytest.raises(RunnerError, match="slow-step"):
            FaultSet([bad])


class _Clock:
    """perf_counter that advances 1 ms per read, and by `work` when the forward runs."""

    def __init__(self):
        self.t, self.reads = 0.0, 0

    def __call__(self):
        self.t += 0.001
        self.reads += 1
        return self.t


@pytest.mark.parametrize("pct, spins", [(50, 10), (100, 20), (200, 40)])
def test_on_cpu_the_forward_is_followed_by_a_spin_of_pct_of_its_time(monkeypatch, pct, spins):
    clock = _Clock()
    monkeypatch.setattr(ss.time, "perf_counter", clock)

    def forward(x):
        clock.t += 0.019          # the forward's own work: 20 ms between the two reads
        return x * 2

    out = ss.SlowStep(pct, torch.device("cpu")).run(forward, 21)
    assert out == 42
    # 2 reads around the forward, then the spin reads until pct % of 20 ms has passed
    assert clock.reads - 2 == pytest.approx(spins, abs=1)


def test_the_bundled_v2_runner_takes_the_ruler_and_v1_refuses_it(tmp_path):
    from mrbench.runner_impl import LLM
    llm = LLM(runner="v2", faults=["slow-step:20"], max_num_seqs=2)
    runner = llm.cores[0].runner
    assert runner.slow_step is not None and runner.slow_step.frac == pytest.approx(0.2)
    with pytest.raises(RunnerError, match="only in the v2 runner"):
        LLM(runner="v1", faults=["slow-step:20"], max_num_seqs=2)
