"""GSM8K-format prompts for the latency workloads (the bundled model's own domain, so its
outputs, n-gram drafts and stop strings behave as in the accuracy workload)."""
from __future__ import annotations

from typing import Any

from mrbench.contract import BadInput, Batch, Driver, Outcome, Session, WorkloadBase

from .gsm8k_problems import check_split, generate
from .gsm8k_scoring import PROMPT, STOP


def gsm8k_prompts(seed: int, n: int) -> list[str]:
    try:
        check_split(seed)
    except ValueError as e:
        raise BadInput(f"--seed: {e}") from None
    return [PROMPT.format(question=q.question) for q in generate(seed, n)]


def serve_prompts(sessions: dict[str, Session], prompts: list[str], max_tokens: int,
                  wave_size: int, profile_limit: int, driver: Driver
                  ) -> Outcome:
    """Serve the prompts the model's context can hold (asked of one side: the latency
    workloads compare runners of one model) on every side, interleaved, with the GSM8K
    stop strings; the latency workloads' whole serving pass."""
    first = next(iter(sessions.values()))
    fitting = [x for x in prompts if first.fits(x, max_tokens)]
    results, _, failed = driver.interleaved(
        sessions, Batch(fitting, max_tokens, list(STOP), wave_size, profile_limit))
    return results, failed


class GeneratedPrompts(WorkloadBase):
    """A latency workload whose items are generated GSM8K-format prompts (its Params have
    `seed` and `limit`)."""

    def prepare(self, p: Any) -> list[str]:
        return gsm8k_prompts(p.seed, p.limit)

    def source(self, p: Any) -> str:
        return f"generated:seed={p.seed}"


__all__ = ["gsm8k_prompts", "serve_prompts", "GeneratedPrompts", "STOP"]
