"""The runner on CUDA: same tokens as on CPU, and no syncs inside a V2 step.

Skipped where torch sees no CUDA device (CI has none); run on a GPU box with
`python -m pytest tests/test_cuda.py`.
"""
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from conftest import RUNNER_KW, make_prompts, run
from runner_impl import LLM, SamplingParams

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA device; CI machines have none")

PHASES = ("mrbench::prepare", "mrbench::forward", "mrbench::sample", "mrbench::postprocess")


@pytest.mark.parametrize("kw", [
    dict(runner="v2"), dict(runner="v1"),
    dict(runner="v2", num_speculative_tokens=2),
    dict(runner="v2", num_speculative_tokens=2, speculative_method="draft"),
    dict(runner="v2", pd_disagg=True),
], ids=["v2", "v1", "v2-ngram2", "v2-draft2", "v2-pd"])
def test_cuda_tokens_match_cpu(tiny_model_dir, tiny_draft_model_dir, prompts64, v2_greedy, kw):
    if kw.get("speculative_method") == "draft":
        kw = {**kw, "draft_model": tiny_draft_model_dir}
    assert run(tiny_model_dir, prompts64, device="cuda", **kw) == v2_greedy


def cuda_syncs_in_phases(model_dir, faults=()) -> tuple[int, int]:
    """(synchronising CUDA runtime calls inside the measured phases, serving steps)."""
    llm = LLM(model_dir, device="cuda", num_speculative_tokens=2, faults=faults,
              **{**RUNNER_KW, "dtype": "float32"})
    prompts = make_prompts(16, seed=4)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        llm.generate(prompts, SamplingParams(temperature=0, max_tokens=16))
    events = prof.events()
    windows = [(e.time_range.start, e.time_range.end) for e in events if e.name in PHASES]
    syncs = [e for e in events if "Synchronize" in e.name or e.name == "aten::_local_scalar_dense"]
    inside = sum(any(a <= e.time_range.start <= b for a, b in windows) for e in syncs)
    return inside, len(llm.step_records)


def test_cuda_v2_step_has_no_sync(tiny_model_dir):
    syncs, steps = cuda_syncs_in_phases(tiny_model_dir)
    assert steps > 10 and syncs == 0


def test_cuda_seq_lens_sync_fault_syncs_every_step(tiny_model_dir):
    syncs, steps = cuda_syncs_in_phases(tiny_model_dir, faults=["seq-lens-sync"])
    assert syncs >= steps
