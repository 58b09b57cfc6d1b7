"""What happened and what to try, for each kind of recorded failure (show/failure_hints.py):
read from the lines the harness and the bundled engine really write, so that a change of
their words that the hints no longer read fails here."""
from __future__ import annotations

import pytest

from mrbench.harness.record.results import RunWriter
from mrbench.harness.record.run_record import Manifest, RunSummary
from mrbench.harness.run.engines.worker import EngineCrashed, EngineTimeout
from mrbench.harness.show.failure_hints import OTHER, hint_for
from mrbench.harness.show.markdown import run_markdown
from mrbench.runner_impl import LLM, SamplingParams


def _stuck_error(empty_pool: bool) -> str:
    """The bundled engine's own no-progress line: its block pool emptied, or its scheduler
    made to admit nothing while blocks are free."""
    llm = LLM(runner="v1", max_num_seqs=2)
    llm.add_request([5] * 10, SamplingParams(temperature=0.0, max_tokens=4))
    if empty_pool:
        llm.cores[0].allocator.free.clear()
    else:
        llm.cores[0].scheduler.max_num_seqs = 0
    with pytest.raises(RuntimeError) as e:
        while llm.has_unfinished():
            llm.step()
    return f"RuntimeError: {e.value}"             # as worker.RemoteError words it


@pytest.mark.parametrize("error, happened, to_try", [
    (str(EngineCrashed("engine process died during 'generate' (killed by signal SIGKILL)",
                       "")),
     "killed with SIGKILL from outside it", "look for an OOM kill"),
    (str(EngineCrashed("engine process died during 'generate' (killed by signal SIGSEGV)",
                       "Fatal Python error: Segmentation fault")),
     "crashed in native code (SIGSEGV)", "PYTHONFAULTHANDLER=1"),
    (str(EngineCrashed("engine process died during 'open' (killed by signal SIGTERM)", "")),
     "ended by SIGTERM from outside it", "find what sent it"),
    (str(EngineCrashed("engine process died during 'generate' (exit code 7)", "bye")),
     "exited by itself with code 7", "read the engine log"),
    (str(EngineCrashed("engine process is gone (exit code 9) before 'open'", "")),
     "exited by itself with code 9", "read the engine log"),
    (str(EngineTimeout("engine did not answer 'generate' within 15 s (hung); its process "
                       "was killed", "")),
     "the watchdog killed its process after 15 s", "raise --timeout"),
    ("bundled target: KV cache of 1000 blocks x 32 tokens needs 93.8 GiB but 20.1 GiB of "
     "cpu memory is available: lower num_kv_blocks",
     "its KV cache needs 93.8 GiB, more than the 20.1 GiB of cpu memory free",
     "lower the workload's num_kv_blocks or max_num_seqs"),
    ("interrupted while it ran (SIGINT or SIGTERM): its results are lost",
     "the run was stopped", "run it again"),
    ("OSError: [Errno 28] No space left on device: '/x/y'", "a disk filled up (ENOSPC)",
     "free space on that disk"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
     "the GPU ran out of memory", "--gpu-memory-utilization"),
    # written before the engine told the two causes apart: no cause is claimed
    ("RuntimeError: engine made no progress in 100 steps (KV blocks exhausted? raise "
     "num_kv_blocks)", "stopped scheduling for 100 steps", "read the engine log"),
])
def test_each_failure_kind_gets_its_own_hint(error, happened, to_try):
    hint = hint_for(error)
    assert happened in hint.happened and to_try in hint.to_try, hint


def test_kv_blocks_are_blamed_only_when_the_pool_is_really_exhausted():
    exhausted, spare = hint_for(_stuck_error(True)), hint_for(_stuck_error(False))
    assert "KV block pool is exhausted" in exhausted.happened
    assert "raise num_kv_blocks" in exhausted.to_try
    assert "with KV blocks to spare" in spare.happened
    assert "not a memory shortage" in spare.happened and "num_kv_blocks" not in spare.to_try


def test_an_error_no_rule_knows_still_gets_what_to_try():
    assert hint_for("ValueError: something else entirely") == OTHER
    assert "traceback is in summary.json" in OTHER.to_try


def test_the_markdown_summary_carries_the_hint(tmp_path):
    summary = RunSummary.build([], [dict(workload="w", side="candidate", error=str(
        EngineTimeout("engine did not answer 'serve' within 30 s (hung); its process was "
                      "killed", "")))])
    run = RunWriter(tmp_path / "r").commit(Manifest(), summary)
    text = run_markdown(run)
    assert "FAILED w (candidate): EngineTimeout" in text
    assert "what happened: the engine stopped answering 'serve': the watchdog killed its " \
           "process after 30 s" in text
    assert "what to try: if the call is only slow" in text
