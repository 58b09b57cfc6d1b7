"""A step's time where the runners run in vLLM's workers (tensor parallel, a PD pair with a
process per runner): the runner's own time in its workers, matched to the session's steps
in order, or the engine core's time with the mismatch counted - never a silent mix."""
from collections import Counter

from mrbench.contract import Step
from mrbench.harness.run.targets.vllm.session import VllmSession


class _Ranks:
    """Stands in for vllm/ranks.py's Ranks: per engine, per rank, the workers' step times."""

    def __init__(self, times: dict[str, list[list[tuple[float, float]]]]) -> None:
        self.times = times

    def step_times(self, instance: str) -> list[list[tuple]]:
        out, self.times[instance] = self.times[instance], [[] for _ in self.times[instance]]
        return out


def _session(steps: list[Step], times: dict) -> VllmSession:
    s = VllmSession.__new__(VllmSession)        # no engine: only the step bookkeeping
    s.engines = dict.fromkeys(times)
    s.ranks = _Ranks(times)
    s._steps, s._worker_timed, s._worker_untimed = steps, 0, 0
    s._moves, s._kv_s = {}, Counter()
    return s


def _step(instance: str, i: int, t0: float, t1: float) -> Step:
    return Step(instance, i, t0, t1, 1, 1, "mixed", cpu_ms=0.1, invol_switches=0,
                vol_switches=1)


def test_each_step_takes_its_workers_time_first_start_to_last_end():
    steps = [_step("prefill", 0, 10.0, 10.001), _step("decode", 1, 10.002, 10.003),
             _step("decode", 2, 10.004, 10.005)]
    s = _session(steps, {"prefill": [[(9.0, 9.5, None, 0.0)]],
                         "decode": [[(11.0, 11.2, 0.05, 0.0), (12.0, 12.1, None, 0.0)],
                                    [(10.9, 11.1, 0.07, 0.0), (12.0, 12.3, None, 0.0)]]})
    got = [(st.instance, st.t_start, st.t_end, st.ruler_ms) for st in s.steps()]
    assert got == [("prefill", 9.0, 9.5, None), ("decode", 10.9, 11.2, 0.07),
                   ("decode", 12.0, 12.3, None)]
    # the engine core's thread clock did not cover the workers' step: not read
    assert all(st.cpu_ms is None and st.vol_switches is None for st in s.steps())
    assert s._worker_untimed == 0
    # later steps take later times; those already timed keep theirs
    s._steps.append(_step("decode", 3, 13.0, 13.001))
    s.ranks.times["decode"] = [[(14.0, 14.5, None, 0.0)], [(14.1, 14.4, None, 0.0)]]
    assert [(st.t_start, st.t_end) for st in s.steps()][1:] == [(10.9, 11.2), (12.0, 12.3),
                                                                (14.0, 14.5)]


def test_a_pd_steps_kv_seconds_come_with_its_times_and_go_to_the_requests_it_moved():
    """The connector's seconds of a step are taken in the worker with the step's times (no
    call between steps) and shared by the tokens each request moved in that step."""
    steps = [_step("prefill", 0, 1.0, 1.1), _step("decode", 1, 2.0, 2.1)]
    s = _session(steps, {"prefill": [[(0.9, 1.0, None, 0.004)]],
                         "decode": [[(1.9, 2.0, None, 0.002)]]})
    s._moves = {0: {"a": 48, "b": 16}, 1: {"a": 48}}
    s.steps()
    assert s._kv_s["a"] == 0.004 * 48 / 64 + 0.002 and s._kv_s["b"] == 0.004 * 16 / 64
    assert not s._moves


def test_steps_that_cannot_be_matched_keep_the_engines_time_and_are_counted():
    steps = [_step("decode", 0, 1.0, 1.5), _step("decode", 1, 2.0, 2.5)]
    s = _session(steps, {"decode": [[(0.5, 0.7, None, 0.0)]]})  # the worker saw one step
    s._moves = {1: {"a": 16}}
    assert [(st.t_start, st.t_end, st.cpu_ms) for st in s.steps()] == [(1.0, 1.5, 0.1),
                                                                       (2.0, 2.5, 0.1)]
    assert not s._kv_s and not s._moves           # no transfer time it could not place
    assert s._worker_untimed == 2


class _Worker:
    """A worker with vLLM's two step calls: execute_model(scheduler_output), then
    sample_tokens(); each busy for a fixed time."""

    def __init__(self, busy_s: float) -> None:
        self.busy_s = busy_s

    def _busy(self) -> None:
        import time
        t = time.perf_counter()
        while time.perf_counter() - t < self.busy_s:
            pass

    def execute_model(self, scheduler_output):
        self._busy()

    def sample_tokens(self, grammar_output=None):
        self._busy()


class _Sched:
    def __init__(self, n: int) -> None:
        self.total_num_scheduled_tokens = n


def test_a_rank_times_its_steps_with_tokens_and_spins_the_ruler_inside_them():
    """In the worker: a step runs from execute_model to the end of sample_tokens, a step
    with nothing scheduled (a KV connector's step without a forward) is not a step the
    session records, and the ruler's spin lands inside the timed step, PCT % of it."""
    from mrbench.harness.run.targets.vllm import ranks as vllm_ranks
    from mrbench.harness.run.targets.vllm.ruler import StepRuler
    w = _Worker(0.004)
    state = vllm_ranks._RankState(ruler=StepRuler(50))
    setattr(w, vllm_ranks._STATE, state)              # as install_on_rank leaves it
    vllm_ranks._cut_steps(w, state)
    for n in (8, 0, 1):
        w.execute_model(_Sched(n))
        if n:
            w.sample_tokens()
    w.execute_model(_Sched(0))            # a step without tokens closes the one before
    assert state.scheduled == [True, False, True, False]
    times = vllm_ranks.take_times_on_rank(w)
    assert len(times) == 2 and vllm_ranks.take_times_on_rank(w) == []
    for t0, t1, ruler_ms, kv_s in times:
        assert kv_s == 0.0                             # no connector in this process
        step_ms = (t1 - t0) * 1e3
        assert 8 * 1.5 * 0.9 <= step_ms < 60          # two calls of 4 ms, + 50 % spun
        assert ruler_ms >= 0.3 * step_ms               # ~1/3 of the step is the spin
