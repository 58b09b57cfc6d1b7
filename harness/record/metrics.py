"""The metrics a run reports, in one registry, named as `vllm bench serve` names them.

Why one home: the list of gateable metrics (the suite's validator) and where each one's
samples come from (the gate) were two tables in two modules that had to agree. Here each
metric is named once, with its unit, the table and column of a side's results its samples
come from, the statistic taken of them, and which way is worse.

Why vLLM's names: a figure that `vllm bench serve` also reports carries vLLM's exact field
name (vllm/benchmarks/serve.py, `benchmark()`'s result), so an mrbench run and an imported
vLLM file put the same figure under the same key, and a vLLM engineer reads either without
a table of synonyms. Before results format 3 mrbench said `e2e` where vLLM says `e2el` and
`output_tokens` for `total_output_tokens`; `current_name` reads those older names. Before
format 4 its spec-decode figures had names of their own and the acceptance rate was a
fraction; `current_figures` reads a side's older figures under vLLM's names and units.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


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
    # a PD pair's KV hand-off per request (through NIXL: the decode engine's pull, from its
    # worker's first sight of the request to `get_finished`); only where a suite names it
    LatencyMetric("p99_kv_handoff_ms", "requests", "kv_handoff_ms", 99),
    LatencyMetric("median_kv_handoff_ms", "requests", "kv_handoff_ms", 50),
)}
# a suite's default `latency_metrics`, in this order: every metric but the KV hand-off's
LATENCY_METRICS = tuple(m for m in LATENCY if "kv_handoff" not in m)

# The per-side summary's latency figures: mean_/median_/std_/pNN_ NAME _ms, as vLLM's
# process_one_metric writes them, of each NAME's table and column. vLLM names ttft, tpot,
# itl and e2el; step (the engine step's duration) is mrbench's own. The per-request
# column stays `e2e_ms` (requests.csv): vLLM has no such column (its per-request list is
# `latencies`, in seconds), and runs of every format read alike.
SUMMARY_FIELDS = {"ttft": ("requests", "ttft_ms"), "tpot": ("requests", "tpot_ms"),
                  "itl": ("itl", "itl_ms"), "e2el": ("requests", "e2e_ms"),
                  "step": ("steps", "duration_ms")}
# The parts of a request's time mrbench records where they apply (queueing, a PD pair's
# prefill and KV hand-off): summarized the same way, only where a side has the samples.
REQUEST_PHASES = {"queue": ("requests", "queue_ms"), "kv_handoff": ("requests", "kv_handoff_ms"),
                  "prefill": ("requests", "prefill_ms")}
# The pNN_ of the summary unless the suite (`percentiles`) or `mrbench run --percentiles`
# chooses others, as `vllm bench serve --metric-percentiles` does: vLLM's default (99) and
# the P90 mrbench has always written.
PERCENTILES = (90, 99)

# vLLM's spec-decode figures (benchmark()'s result when the server ran speculative
# decoding; spec.spec_summary makes them): counts of drafts, draft tokens and accepted
# tokens (spec_decode_num_drafts, _draft_tokens, _accepted_tokens), the acceptance rate
# accepted / draft tokens in percent (spec_decode_acceptance_rate), the acceptance length
# 1 + accepted / drafts (spec_decode_acceptance_length), and accepted / drafts per draft
# position, a list of fractions (SPEC_POSITIONS).
SPEC_POSITIONS = "spec_decode_per_position_acceptance_rates"
# a side's spec-decode figure before results format 4 -> vLLM's name and the factor that
# takes its value to vLLM's unit (mrbench's acceptance rate was a fraction)
SPEC_RENAMED = {"num_drafts": ("spec_decode_num_drafts", 1),
                "num_draft_tokens": ("spec_decode_draft_tokens", 1),
                "num_accepted_tokens": ("spec_decode_accepted_tokens", 1),
                "acceptance_rate": ("spec_decode_acceptance_rate", 100),
                "mean_acceptance_length": ("spec_decode_acceptance_length", 1)}
_OLD_POSITION = re.compile(r"^acceptance_rate_pos_(\d+)$")   # one figure per position

# older mrbench names -> vLLM's, where more than `e2e` -> `e2el` changed
_RENAMED = {"output_tokens": "total_output_tokens"}


def checked_percentiles(values: Iterable[float]) -> tuple[float, ...]:
    """`values` as the summary's percentile list: ascending, each once. ValueError for an
    empty list or a value outside (0, 100]: np.percentile takes 0, but a P0 is the
    minimum, not a latency percentile anyone gates, and NaN or inf is no percentile."""
    given = [float(p) for p in values]
    bad = [p for p in given if not (math.isfinite(p) and 0 < p <= 100)]
    if not given:
        raise ValueError("no percentile given")
    if bad:
        raise ValueError(f"percentile {int(bad[0]) if bad[0].is_integer() else bad[0]} is "
                         f"not in (0, 100]")
    return tuple(sorted(set(given)))


def current_name(name: str) -> str:
    """`name` as mrbench names it now. A run, suite or history written before results
    format 3 said `e2e` where vLLM says `e2el` (p99_e2e_ms, mean_e2e_ms, the history's
    judged:p99_e2e_ms, the check p99_e2e_ms_vs_history) and `output_tokens` for vLLM's
    `total_output_tokens`; every other name is returned as it is."""
    return _RENAMED.get(name) or name.replace("_e2e_ms", "_e2el_ms")


def current_figures(figures: Mapping[str, Any]) -> dict[str, Any]:
    """One side's figures (a summary's `metrics[workload][side]`) as mrbench names them
    now: each key by `current_name`, where an older key whose current name is also there
    is dropped (an older import kept vLLM's mean_e2el_ms beside its own mean_e2e_ms); and
    the spec-decode figures of a run before results format 4 under vLLM's names and units
    (SPEC_RENAMED: the acceptance rate x 100; acceptance_rate_pos_J as the list
    spec_decode_per_position_acceptance_rates). Not in `current_name`: the check
    `mean_acceptance_length` keeps its name, only the side's figure is vLLM's."""
    out: dict[str, Any] = {}
    positions: dict[int, Any] = {}
    for key, v in figures.items():
        if (m := _OLD_POSITION.match(key)) is not None:
            positions[int(m[1])] = v
        elif key in SPEC_RENAMED:
            name, factor = SPEC_RENAMED[key]
            if name not in figures:
                out[name] = v * factor if isinstance(v, (int, float)) else v
        elif (new := current_name(key)) == key or new not in figures:
            out[new] = v
    if positions and SPEC_POSITIONS not in figures:
        out[SPEC_POSITIONS] = [positions[j] for j in sorted(positions)]
    return out
