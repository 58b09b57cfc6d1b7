"""GSM8K-format prompts for the latency workloads (the bundled model's own domain, so its
outputs, n-gram drafts and stop strings behave as in the accuracy workload)."""
from __future__ import annotations

from harness.errors import BadInput

from .gsm8k_problems import check_split, generate
from .gsm8k_scoring import PROMPT, STOP


def gsm8k_prompts(seed: int, n: int) -> list[str]:
    try:
        check_split(seed)
    except ValueError as e:
        raise BadInput(f"--seed: {e}") from None
    return [PROMPT.format(question=q.question) for q in generate(seed, n)]


__all__ = ["gsm8k_prompts", "STOP"]
