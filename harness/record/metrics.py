"""The metrics a run reports, in one registry, named as `vllm bench serve` names them.

Why one home: the list of gateable metrics (the suite's validator) and where each one's
samples come from (the gate) were two tables in two modules that had to agree. Here each
metric is named once, with its unit, the table and column of a side's results its samples
come from, the statistic taken of them, and which way is worse.

Why vLLM's names: a figure that `vllm bench serve` also reports carries vLLM's exact field
name (vllm/benchmarks/serve.py, `benchmark()`'s result), so an mrbench run and an imported
vLLM file put the same figure under the same key, and a vLLM engineer reads either without
a table of synonyms. Before results format 3 mrbench said `e2e` where vLLM says `e2el` and
`output_tokens` for `total_output_tokens`; `current_name` reads those older names.
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
    LatencyMetric("p99_e2el_ms", "requests", "e2e_ms", 99),
    LatencyMetric("p99_step_ms", "steps", "duration_ms", 99),
    # medians: a uniform slowdown moves every step; a burst moves a tail, not the median
    LatencyMetric("median_step_ms", "steps", "duration_ms", 50),
    LatencyMetric("median_tpot_ms", "requests", "tpot_ms", 50),
)}
LATENCY_METRICS = tuple(LATENCY)        # a suite's default `latency_metrics`, in this order

# The per-side summary's latency figures: mean_/median_/std_/pNN_ NAME _ms, as vLLM's
# process_one_metric writes them, of each NAME's table and column. vLLM names ttft, tpot,
# itl and e2el; step (the engine step's duration) is mrbench's own. The per-request
# column stays `e2e_ms` (requests.csv): vLLM has no such column (its per-request list is
# `latencies`, in seconds), and runs of every format read alike.
SUMMARY_FIELDS = {"ttft": ("requests", "ttft_ms"), "tpot": ("requests", "tpot_ms"),
                  "itl": ("itl", "itl_ms"), "e2el": ("requests", "e2e_ms"),
                  "step": ("steps", "duration_ms")}
# The pNN_ of the summary: vLLM's default `--metric-percentiles` ("99") and the P90 mrbench
# has always written. Fixed: the summary is made without the suite (orchestrate), so a
# suite cannot choose them.
PERCENTILES = (90, 99)

# older mrbench names -> vLLM's, where more than `e2e` -> `e2el` changed
_RENAMED = {"output_tokens": "total_output_tokens"}


def current_name(name: str) -> str:
    """`name` as mrbench names it now. A run, suite or history written before results
    format 3 said `e2e` where vLLM says `e2el` (p99_e2e_ms, mean_e2e_ms, the history's
    judged:p99_e2e_ms, the check p99_e2e_ms_vs_history) and `output_tokens` for vLLM's
    `total_output_tokens`; every other name is returned as it is."""
    return _RENAMED.get(name) or name.replace("_e2e_ms", "_e2el_ms")
