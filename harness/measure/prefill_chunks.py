"""Chunked-prefill coverage, counted from what an engine scheduled.

A prompt longer than the step's token budget (`max_num_batched_tokens`, shared by every
request of the step) is prefilled in chunks. The first chunk starts the prompt, the last
one finishes it and samples the first output token; a chunk in between does neither: it
starts mid-prompt and samples nothing. Those middle chunks exist only for prompts of three
or more chunks, and vLLM's MRv2 once wrote their KV to the wrong cache slots (PR 36580,
`_compute_slot_mappings_kernel`, "cause of insidious correctness issues"). A suite whose
prompts never span three chunks cannot see that bug class, so each target feeds every
scheduled chunk here (its scheduler's output: the request, the tokens computed before the
step, the tokens scheduled, the prompt's length) and reports the counts as session
counters; `coverage.chunk_coverage_check` reads them.
"""
from __future__ import annotations

MIDDLE = "prefill_middle_chunks"       # chunks that neither start nor finish their prompt
PROMPTS_3PLUS = "prefill_prompts_3plus_chunks"   # prompts finished after >= 3 chunks
MIN_CHUNKS = 3                          # the fewest chunks that have a middle one


class PrefillChunks:
    """Per engine instance: the chunks each unfinished prompt has had, and the totals since
    the last `reset` (a prompt still open at a reset keeps its chunks)."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], int] = {}      # (instance, request) -> chunks
        self.middle = self.prompts_3plus = 0

    def chunk(self, instance: str, req_id: str, start: int, num_tokens: int,
              prompt_len: int) -> None:
        """One scheduled row: `num_tokens` query tokens from position `start` (the tokens
        computed before the step). Rows past the prompt (decode, drafts) are not prefill."""
        if start >= prompt_len or num_tokens <= 0:
            return
        key = (instance, req_id)
        n = 1 if start == 0 else self._open.get(key, 0) + 1     # start 0: (re)started
        if start + num_tokens >= prompt_len:
            self._open.pop(key, None)
            self.prompts_3plus += n >= MIN_CHUNKS
        else:
            self._open[key] = n
            self.middle += start > 0

    def counters(self) -> dict[str, float]:
        return {MIDDLE: float(self.middle), PROMPTS_3PLUS: float(self.prompts_3plus)}

    def reset(self) -> None:
        self.middle = self.prompts_3plus = 0
