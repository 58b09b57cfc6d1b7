"""GSM8K-format prompts for the latency workloads (the bundled model's own domain, so its
outputs, n-gram drafts and stop strings behave as in the accuracy workload)."""
from __future__ import annotations

from mrbench.harness.errors import BadInput
from mrbench.harness.execute import Batch, SideFailure, SideResult, drive_interleaved
from mrbench.harness.targets.base import Session

from .gsm8k_problems import check_split, generate
from .gsm8k_scoring import PROMPT, STOP


def gsm8k_prompts(seed: int, n: int) -> list[str]:
    try:
        check_split(seed)
    except ValueError as e:
        raise BadInput(f"--seed: {e}") from None
    return [PROMPT.format(question=q.question) for q in generate(seed, n)]


def serve_prompts(sessions: dict[str, Session], prompts: list[str], max_tokens: int,
                  wave_size: int, profile_limit: int, device: str
                  ) -> tuple[dict[str, SideResult], dict[str, SideFailure]]:
    """Serve the prompts the model's context can hold (asked of one side: the latency
    workloads compare runners of one model) on every side, interleaved, with the GSM8K
    stop strings; the latency workloads' whole serving pass."""
    first = next(iter(sessions.values()))
    fitting = [x for x in prompts if first.fits(x, max_tokens)]
    results, _, failed = drive_interleaved(
        sessions, Batch(fitting, max_tokens, list(STOP), wave_size, profile_limit), device)
    return results, failed


__all__ = ["gsm8k_prompts", "serve_prompts", "STOP"]
