"""The latency metrics a suite can gate, in one registry.

Why one home: the list of gateable metrics (the suite's validator) and where each one's
samples come from (the gate) were two tables in two modules that had to agree. Here each
metric is named once, with its unit, the table and column of a side's results its samples
come from, the statistic taken of them, and which way is worse.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LatencyMetric:
    """A gateable latency figure: `statistic` of `table`.`column` (a side's per-request,
    per-step or per-token rows), in `unit`; a larger value is worse for every one of them."""

    name: str
    table: str          # "requests", "steps" or "itl" (SideResult's tables)
    column: str
    quantile: int       # 99: the tail (the per-wave P99 gate); 50: the median gate
    unit: str = "ms"
    higher_is_worse: bool = True


LATENCY: dict[str, LatencyMetric] = {m.name: m for m in (
    LatencyMetric("p99_ttft_ms", "requests", "ttft_ms", 99),
    LatencyMetric("p99_tpot_ms", "requests", "tpot_ms", 99),
    LatencyMetric("p99_itl_ms", "itl", "itl_ms", 99),
    LatencyMetric("p99_e2e_ms", "requests", "e2e_ms", 99),
    LatencyMetric("p99_step_ms", "steps", "duration_ms", 99),
    # medians: a uniform slowdown moves every step; a burst moves a tail, not the median
    LatencyMetric("median_step_ms", "steps", "duration_ms", 50),
    LatencyMetric("median_tpot_ms", "requests", "tpot_ms", 50),
)}
LATENCY_METRICS = tuple(LATENCY)        # a suite's default `latency_metrics`, in this order

# The per-side summary (vLLM bench's field names: mean_/median_/p90_/p99_ NAME _ms): each
# figure's table and column
SUMMARY_FIELDS = {"ttft": ("requests", "ttft_ms"), "tpot": ("requests", "tpot_ms"),
                  "itl": ("itl", "itl_ms"), "e2e": ("requests", "e2e_ms"),
                  "step": ("steps", "duration_ms")}
