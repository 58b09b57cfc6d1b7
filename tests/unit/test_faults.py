"""Each fault switch changes the behaviour of its own bug class and nothing else.

One workload exercises all five classes at once: PD disaggregation (slot reuse on the
decode side) with n-gram speculative decoding at k = 1, profiled. Five detectors read
it; each must fire exactly when its own fault is on (a catch matrix in miniature).
"""
import collections

import pytest
from support.runner import RUNNER_KW, make_prompts
from torch.profiler import ProfilerActivity, profile

from mrbench.harness.run.targets.bundled import label_phases
from mrbench.runner_impl import FAULTS, LLM, SamplingParams
from mrbench.runner_impl.v2.dispatch import is_prefill_key

PARAMS = SamplingParams(temperature=0.0, max_tokens=24)
SYNC_OPS = ("aten::_local_scalar_dense", "aten::item", "aten::nonzero")


def op_counts_per_window(prof, label: str) -> list[collections.Counter]:
    """Ops inside each `label` window (serving steps only: warmup ran before profiling)."""
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    windows = [(e.time_range.start, e.time_range.end) for e in events if e.name == label]
    counts = [collections.Counter() for _ in windows]
    for e in events:
        for c, (a, b) in zip(counts, windows):
            if a <= e.time_range.start and e.time_range.end <= b and e.name != label:
                c[e.name] += 1
    return counts


def observe(model_dir, prompts, faults=(), k=1):
    llm = LLM(model_dir, pd_disagg=True, num_speculative_tokens=k, faults=faults, **RUNNER_KW)
    label_phases(llm)                    # the harness's step and phase ranges
    slack: list[int] = []
    first_decode_slots: dict[str, int] = {}
    slot_history: collections.Counter = collections.Counter()

    def audit(core, sched, out):
        if core.name != "decode":
            return
        for new in sched.scheduled_new_reqs:
            slot = core.runner.state.req_id_to_index[new.req_id]
            first_decode_slots[new.req_id] = slot_history[slot]   # earlier occupants
            slot_history[slot] += 1
        slack.extend(a["mirror"] - a["truth"] for a in core.runner.audit().values())
    llm.add_step_callback(audit)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        outs = llm.generate(prompts, PARAMS)
    ops = sum(op_counts_per_window(prof, "mrbench::step"), collections.Counter())
    # per sampling call, so the figure does not depend on how many steps ran
    sample_ops = max(c["aten::cat"] + c["aten::argmax"]
                     for c in op_counts_per_window(prof, "mrbench::sample"))
    steps = len(llm.step_records)
    warm_keys = [key for core in llm.cores for phase, key in core.runner.dispatch_log
                 if phase == "warmup"]
    return dict(tokens=[o.token_ids for o in outs], slack=slack, ops=ops, steps=steps,
                sample_ops=sample_ops,
                warm_keys=warm_keys, reused=first_decode_slots)


@pytest.fixture(scope="module")
def prompts():
    return make_prompts(16, seed=11, hi=60)


@pytest.fixture(scope="module")
def clean(tiny_model_dir, prompts):
    return observe(tiny_model_dir, prompts)


@pytest.fixture(scope="module")
def faulty(tiny_model_dir, prompts):
    """observe() with one fault on, each fault observed once for the module: the detector
    matrix and the per-fault tests below read the same deterministic run (about 8 s each
    on two cores)."""
    seen: dict[str, dict] = {}

    def get(fault: str) -> dict:
        if fault not in seen:
            seen[fault] = observe(tiny_model_dir, prompts, faults=[fault])
        return seen[fault]
    return get


def detectors(obs, clean) -> dict[str, bool]:
    return {
        # 1. wrong tokens under PD (vs the clean run of the same workload)
        "stale-slot-state": obs["tokens"] != clean["tokens"],
        # 2. host mirror above the device truth
        "mirror-increment": max(obs["slack"]) > 0,
        # 3. synchronising ops inside serving steps
        "seq-lens-sync": sum(obs["ops"][n] for n in SYNC_OPS) > 0,
        # 4. more cat/argmax ops in one sampling call than the clean run (deterministic)
        "accept-count-cat-argmax": obs["sample_ops"] > clean["sample_ops"],
        # 5. no batch classified as prefill during warmup
        "warmup-short-prefill": not any(is_prefill_key(k) for k in obs["warm_keys"]),
    }


def test_clean_run_triggers_no_detector(clean):
    assert not any(detectors(clean, clean).values())
    assert clean["ops"]["aten::cat"] > 0 and clean["steps"] > 50   # the workload is real


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault_triggers_only_its_detector(faulty, clean, fault):
    obs = faulty(fault)
    fired = {name for name, hit in detectors(obs, clean).items() if hit}
    assert fired == {fault}


def test_stale_slot_state_corrupts_first_decode_token_of_reused_slots(faulty, clean):
    obs = faulty("stale-slot-state")
    reused = [int(r) for r, earlier in obs["reused"].items() if earlier > 0]
    assert len(reused) >= 8
    for i in reused:
        good, bad = clean["tokens"][i], obs["tokens"][i]
        assert bad[0] == good[0]            # the prefill instance's token is fine
    wrong = sum(obs["tokens"][i][1] != clean["tokens"][i][1] for i in reused)
    assert wrong >= len(reused) * 0.8       # the first decode step read the previous occupant


def test_mirror_slack_grows_without_bound(tiny_model_dir):
    """Colocated, long outputs, k = 2: the mirror runs further ahead with every rejection."""
    llm = LLM(tiny_model_dir, num_speculative_tokens=2, faults=["mirror-increment"],
              **{**RUNNER_KW, "max_num_seqs": 1})
    slack: list[int] = []
    llm.add_step_callback(lambda core, s, o: slack.extend(
        a["mirror"] - a["truth"] for a in core.runner.audit().values()))
    out = llm.generate([make_prompts(1, seed=2)[0]],
                       SamplingParams(temperature=0, max_tokens=80, ignore_eos=True))[0]
    rejected = out.metrics.num_draft_tokens - out.metrics.num_accepted_tokens
    assert slack == sorted(slack)           # monotone
    assert slack[-1] >= rejected - 2 > 40   # one unit per rejected draft, never corrected


def test_seq_lens_sync_adds_one_sync_per_step(faulty, clean):
    obs = faulty("seq-lens-sync")
    assert obs["ops"]["aten::_local_scalar_dense"] >= obs["steps"]
    assert clean["ops"]["aten::_local_scalar_dense"] == 0
    assert obs["tokens"] == clean["tokens"]


def test_accept_count_fault_keeps_tokens(faulty, clean):
    obs = faulty("accept-count-cat-argmax")
    assert obs["tokens"] == clean["tokens"]
    assert obs["sample_ops"] == clean["sample_ops"] + 2          # one cat, one argmax
    assert obs["ops"]["aten::argmax"] > clean["ops"]["aten::argmax"]


@pytest.mark.parametrize("k", [0, 1, 2])
def test_warmup_short_prefill_only_bites_at_k1(tiny_model_dir, k):
    def warm_keys(faults):
        llm = LLM(tiny_model_dir, num_speculative_tokens=k, faults=faults, **RUNNER_KW)
        return [key for phase, key in llm.cores[0].runner.dispatch_log if phase == "warmup"]
    assert any(is_prefill_key(key) for key in warm_keys(()))
    # prompt of 2 tokens == decode query (1 + k) only when k == 1
    assert any(is_prefill_key(key) for key in warm_keys(["warmup-short-prefill"])) == (k != 1)
