"""The timed waves run with the harness's heap frozen (`execute._frozen_waves`) and leave it
unfrozen. Why it matters: a frozen object is never collected, so a workload that left its
freeze behind would keep every later workload's garbage (and its engines' records) alive
for the life of the run, and a full collection before a wave would no longer see them."""
import gc

from mrbench.contract import Batch, Completion
from mrbench.harness.run.execute import drive_interleaved


class _StandIn:
    """A session that answers at once and records what the collector froze while each of
    its waves ran: enough of `Session` for drive_interleaved."""

    vocab_size, step_label, auditing, phase_labels = 16, "step", False, {}

    def __init__(self) -> None:
        self.frozen_in_wave: list[int] = []

    def generate(self, prompts, max_tokens, stop, sampling=None, logprobs=None):
        self.frozen_in_wave.append(gc.get_freeze_count())
        return [Completion(prompt_token_ids=[1], token_ids=[2, 3], text="x", arrival_time=0.0,
                           token_times=[0.0, 0.001]) for _ in prompts]

    def dispatch_log(self):
        return []

    def counters(self):
        return {}

    def steps(self):
        return []

    def reset_steps(self):
        pass

    def resolved(self):
        return {"runner": "stand-in"}


def test_waves_run_frozen_and_the_workload_unfreezes_at_its_end():
    gc.unfreeze()
    sides = {"baseline": _StandIn(), "candidate": _StandIn()}
    batch = Batch(prompts=[f"p{i}" for i in range(8)], max_tokens=2, stop=[], wave_size=2,
                  profile_limit=0)
    ok, comps, failed = drive_interleaved(sides, batch, "cpu")
    assert not failed and set(ok) == set(sides)
    for s in sides.values():
        assert len(s.frozen_in_wave) == 4
        assert all(n > 0 for n in s.frozen_in_wave)     # each wave ran after a freeze
    assert gc.get_freeze_count() == 0                    # and none outlives the workload


def test_a_side_that_raises_still_leaves_the_heap_unfrozen():
    class _Crashes(_StandIn):
        def generate(self, *a, **k):
            raise RuntimeError("engine died")

    gc.unfreeze()
    sides = {"baseline": _StandIn(), "candidate": _Crashes()}
    batch = Batch(prompts=["a", "b"], max_tokens=2, stop=[], wave_size=1, profile_limit=0)
    ok, _, failed = drive_interleaved(sides, batch, "cpu")
    assert set(failed) == {"candidate"} and "engine died" in failed["candidate"].error
    assert gc.get_freeze_count() == 0
