"""`slow-step:PCT`, the latency ruler: parsed and validated like a fault; it busies the core
for PCT % of a measured time, inside the forward call (so inside the forward phase the
harness profiles): the recorded step's (on vLLM, the harness's timing of the engine step)."""
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
    """perf_counter that advances 1 ms per read (the spin reads it once per turn), and by
    what a test's forward says it worked."""

    def __init__(self):
        self.t, self.reads = 0.0, 0

    def __call__(self):
        self.t += 0.001
        self.reads += 1
        return self.t


def _forward(clock, ms):
    def forward(x):
        clock.t += ms / 1e3 - 0.001     # the forward's own work, between the two reads
        return x * 2
    return forward


def test_the_spin_is_pct_of_the_measured_step_less_its_own_part(monkeypatch):
    """The engine's step (schedule to output) is what the harness reports; the ruler is a
    share of that, not of the forward inside it, and its own busy time is not folded back
    into its base (else it would compound)."""
    clock = _Clock()
    monkeypatch.setattr(ss.time, "perf_counter", clock)
    ruler = ss.SlowStep(50, torch.device("cpu"))
    decode = ("uniform_decode", 4)
    ruler.run(_forward(clock, 2), 1, key=decode)
    ruler.observe_step(10.0, decode)            # a 10 ms step, 2 ms of it the forward
    assert ruler.base_ms[decode] == pytest.approx(10.0)
    for _ in range(5):
        ruler.run(_forward(clock, 2), 1, key=decode)
        added = ruler._unobserved[1]
        assert added == pytest.approx(5.0, abs=1.5)   # 50 % of the step, not of 2 ms
        ruler.observe_step(10.0 + added, decode)      # the step grew by the ruler's part
        assert ruler.base_ms[decode] == pytest.approx(10.0, abs=0.01)
    # another class (a prefill) has its own base: none yet, so nothing added
    before = ruler.added_ms_total
    ruler.run(_forward(clock, 2), 1, key=("mixed", 300))
    assert ruler.added_ms_total == before
    # an empty step (no forward) folds nothing, nor does a step of another class than the
    # forward's, nor a second observation of one forward
    ruler.observe_step(1.0, ())
    ruler.observe_step(99.0, decode)                 # no forward since the last observation
    ruler.run(_forward(clock, 2), 1, key=decode)
    ruler.observe_step(99.0, ("mixed", 300))         # not the forward's class
    ruler.observe_step(99.0, decode)                 # that forward was already observed
    assert ruler.base_ms[decode] == pytest.approx(10.0, abs=0.01) and ruler._unobserved is None


def test_the_base_is_the_median_step_and_machine_stalls_do_not_carry_it():
    """The ruler's base tracks a class's median step: steps of 0.5 ms +- 20 %, with a
    machine stall now and then (five steps tenfold, 5 % of all steps). A mean would sit
    ~45 % above the median, so slow-step:PCT would add ~1.45 PCT; the base stays within a
    few per cent of the median, and follows the step when it gets slower."""
    import numpy as np
    rng = np.random.default_rng(0)
    ruler = ss.SlowStep(10, torch.device("cpu"))
    times = rng.lognormal(np.log(0.5), 0.2, size=4000)
    for start in rng.choice(np.arange(50, 3990, 100), size=40, replace=False):
        times[start:start + 5] *= 10                   # 200 stalled steps of 4000
    assert np.mean(times) > 1.4 * np.median(times)
    bases = []                          # the base each step was slowed by
    for t in times:
        ruler._fold("decode", float(t))
        bases.append(ruler.base_ms["decode"])
    assert np.mean(bases[100:]) == pytest.approx(np.median(times), rel=0.06)
    assert max(bases[100:]) < 1.25 * np.median(times)
    for t in 1.3 * rng.lognormal(np.log(0.5), 0.2, size=400):     # the step got slower
        ruler._fold("decode", float(t))
    assert ruler.base_ms["decode"] == pytest.approx(1.3 * np.median(times), rel=0.06)


def test_step_classes_keep_decode_sizes_and_bucket_prefill_tokens():
    assert ss.step_class(("uniform_decode", 9)) != ss.step_class(("uniform_decode", 10))
    assert ss.step_class(("mixed", 600)) == ss.step_class(("mixed", 1000))
    assert ss.step_class(("mixed", 600)) != ss.step_class(("mixed", 2048))


def test_on_the_bundled_engine_the_ruler_is_fed_the_recorded_steps():
    """slow-step:50 on the CPU engine: after a generation the ruler's base for decode
    steps is the engine's recorded decode step less the ruler's part (not the forward's
    time alone), and it slowed those steps by about half of that."""
    from mrbench.runner_impl import LLM, SamplingParams
    llm = LLM(runner="v2", faults=["slow-step:50"], max_num_seqs=2)
    llm.generate(["one two three", "four five six seven"],
                 SamplingParams(temperature=0.0, max_tokens=24))
    core = llm.cores[0]
    ruler = core.runner.slow_step
    decode = [r for r in core.step_records if r.dispatch_key == ("uniform_decode", 2)]
    assert len(decode) >= 10 and ruler.slowed_steps >= 10
    base = ruler.base_ms[("uniform_decode", 2)]
    measured = sorted((r.t_end - r.t_start) * 1e3 for r in decode)[len(decode) // 2]
    # the recorded step holds the ruler's third: base ~ measured / 1.5
    assert 0.5 * measured / 1.5 < base < 1.5 * measured / 1.5
    # each record carries the ruler's own busy time, and together they are all it added
    # (its share of the step is the base's business, above; test_the_busy_work_... below)
    slowed = [r for r in decode if r.ruler_ms]
    assert len(slowed) >= 5 and all(r.ruler_ms is None or r.ruler_ms >= 0 for r in decode)
    assert sum(r.ruler_ms or 0 for r in core.step_records) == pytest.approx(
        ruler.added_ms_total)


def test_the_busy_work_comes_before_the_forward(monkeypatch):
    """On a synchronous step the device is idle when the call starts: busy work there
    delays the whole step. After the forward's launches it overlapped the device's work
    and hid (the H200, docs/detection-power.md)."""
    clock = _Clock()
    monkeypatch.setattr(ss.time, "perf_counter", clock)
    ruler = ss.SlowStep(50, torch.device("cpu"))
    decode = ("uniform_decode", 4)
    ruler.run(_forward(clock, 2), 1, key=decode)
    ruler.observe_step(10.0, decode)
    started = []

    def forward(x):
        started.append(clock.t)
        return x
    t0 = clock.t
    ruler.run(forward, 1, key=decode)
    assert (started[0] - t0) * 1e3 >= 5            # after the 5 ms spin, not 1 ms (a read)
    assert ruler.observe_step(15.0, decode) == pytest.approx(5.0, abs=2)
    assert ruler.observe_step(15.0, decode) is None                # seen once only


def test_the_bundled_v2_runner_takes_the_ruler_and_v1_refuses_it(tmp_path):
    from mrbench.runner_impl import LLM
    llm = LLM(runner="v2", faults=["slow-step:20"], max_num_seqs=2)
    runner = llm.cores[0].runner
    assert runner.slow_step is not None and runner.slow_step.frac == pytest.approx(0.2)
    with pytest.raises(RunnerError, match="only in the v2 runner"):
        LLM(runner="v1", faults=["slow-step:20"], max_num_seqs=2)
    # a step record under async scheduling also spans the next step's busy work
    with pytest.raises(RunnerError, match="without async_scheduling"):
        LLM(runner="v2", faults=["slow-step:20"], max_num_seqs=2, async_scheduling=True)


def test_each_step_carries_its_threads_clock():
    """The engine records the stepping thread's CPU time and context switches with every
    synchronous step (runner_impl/thread_clock.py): on a CPU-bound step the CPU time is
    most of the wall time, and it never exceeds it by more than the clocks' resolution."""
    import sys

    from mrbench.runner_impl.thread_clock import thread_clock
    c0 = thread_clock()
    sum(i * i for i in range(200_000))
    cpu_ms, invol, vol = thread_clock().since(c0)
    assert cpu_ms > 1
    if sys.platform == "linux":
        assert invol is not None and vol is not None and invol >= 0 and vol >= 0


def test_a_runs_printout_gives_the_rulers_own_account(capsys, tmp_path):
    """`mrbench run --fault slow-step:PCT` prints what the ruler added beside the table,
    so a ruler that hid (added 7.6 %, the median step moved 2 %) is seen in the run."""
    from mrbench.harness.commands.common import print_summary
    from mrbench.harness.record.run_record import RunSummary
    summary = RunSummary.build([], metrics={"gsm8k": {"candidate": {"ruler_added_pct": 7.58},
                                                      "baseline": {}}})
    print_summary(summary, tmp_path, as_json=False)
    assert "ruler gsm8k: the candidate's slow-step busy work added +7.6 %" in capsys.readouterr().out
    print_summary(RunSummary.build([], metrics={"gsm8k": {"candidate": {}}}), tmp_path, False)
    assert "ruler" not in capsys.readouterr().out
