"""Poisoned freed slots (the state audit's debug mode) change nothing in a clean run and make
a stale read unmistakable."""
from support.runner import make_prompts, run


def test_poison_is_invisible_when_state_is_initialised(tiny_model_dir):
    prompts = make_prompts(12, seed=3, hi=40)
    plain = run(tiny_model_dir, prompts, pd_disagg=True)
    poisoned = run(tiny_model_dir, prompts, pd_disagg=True, debug_poison_freed_slots=True)
    assert poisoned == plain


def test_poison_shows_a_stale_read(tiny_model_dir):
    prompts = make_prompts(12, seed=3, hi=40)
    plain = run(tiny_model_dir, prompts, pd_disagg=True)
    stale = run(tiny_model_dir, prompts, pd_disagg=True, faults=("stale-slot-state",),
                debug_poison_freed_slots=True)
    # max_num_seqs=4 (RUNNER_KW): requests 5.. land in reused decode slots and read poison.
    # Their first token comes from prefill (right); the second is decoded from the poison.
    wrong = [i for i, (a, b) in enumerate(zip(plain, stale)) if a[1:2] != b[1:2]]
    assert len(wrong) >= 6, wrong
    assert all(a[0] == b[0] for a, b in zip(plain, stale))
