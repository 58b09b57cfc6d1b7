"""count_per_step (harness/measure/profiler.py) counts with arrays; this holds it to the
rule it implements, written out event by event: an event counts for the step window holding
it and for the innermost phase range holding it (the latest-starting range, the ranges of
one label merged; a tie goes to the phase listed first), labels themselves only as "the
phase ran", `[memory]` records with positive bytes as allocations. Random traces with
nested and overlapping phases, ties, events outside every step and straddling a window's
end, on CPU and CUDA rules."""
import bisect

import numpy as np
import pytest

from mrbench.harness.measure import phases
from mrbench.harness.measure.profiler import CUDA_SYNC_CALLS, LISTED_OPS, count_per_step, is_sync

NAMES = ("aten::mm", "aten::add", "aten::_local_scalar_dense", "aten::item", "aten::nonzero",
         "cudaStreamSynchronize", "cudaMemcpy", "cudaLaunchKernel", "[memory]", "misc")


def _reference(events, step_label, phase_labels, device):
    """The rule, one event at a time."""
    def windows(label):
        w = sorted((a, b) for n, a, b, _ in events if n == label)
        return [a for a, _ in w], [b for _, b in w]

    def merged(starts, ends):
        out: list[list[int]] = []
        for a, b in zip(starts, ends):
            if out and a <= out[-1][1]:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        return [a for a, _ in out], [b for _, b in out]

    def holding(starts, ends, t0, t1):
        i = bisect.bisect_right(starts, t0) - 1
        return i if i >= 0 and t1 <= ends[i] else None

    steps = windows(step_label)
    ranges = {p: merged(*windows(lab)) for p, lab in phase_labels.items()}
    of_label = {lab: p for p, lab in phase_labels.items()}
    rows = [dict(step=i, ops=0, allocs=0, alloc_bytes=0,
                 **{f"{k}_{p}": 0 for k in ("syncs", "ops", "events", "ran")
                    for p in phase_labels},
                 **{n: 0 for n in LISTED_OPS + CUDA_SYNC_CALLS})
            for i in range(len(steps[0]))]
    for name, t0, t1, nbytes in events:
        i = holding(*steps, t0, t1)
        if i is None:
            continue
        row = rows[i]
        if name == step_label or name in of_label:
            if name in of_label:
                row[f"ran_{of_label[name]}"] += 1
            continue
        best, best_start = None, -1
        for p, (ps, pe) in ranges.items():
            j = holding(ps, pe, t0, t1)
            if j is not None and ps[j] > best_start:
                best, best_start = p, ps[j]
        if best is not None:
            row[f"events_{best}"] += 1
        if name == "[memory]":
            if nbytes > 0:
                row["allocs"] += 1
                row["alloc_bytes"] += nbytes
            continue
        aten = name.startswith("aten::")
        row["ops"] += aten
        if name in LISTED_OPS + CUDA_SYNC_CALLS:
            row[name] += 1
        if best is not None:
            row[f"ops_{best}"] += aten
            row[f"syncs_{best}"] += is_sync(name, device)
    for row in rows:
        row["syncs_hot"] = sum(row[f"syncs_{p}"] for p in phases.HOT_PHASES if p in phase_labels)
    return rows


def _trace(rng: np.random.Generator) -> list[tuple[str, int, int, int]]:
    """A few steps; in each, phase ranges (some nested, some sharing a start, one phase
    twice), ops and memory records anywhere, some outside every step or across its end."""
    events = []
    labels = list(phases.PHASE_LABELS.values())
    t = 0
    for _ in range(rng.integers(1, 6)):
        start, end = t + 5, t + 5 + int(rng.integers(200, 400))
        events.append((phases.STEP_LABEL, start, end, 0))
        for _ in range(rng.integers(0, 8)):
            a = int(rng.integers(start, end - 10))
            b = int(rng.integers(a + 1, end + 1))
            events.append((labels[rng.integers(len(labels))], a, b, 0))
            if rng.random() < 0.3:                      # another phase from the same start
                other = labels[rng.integers(len(labels))]
                events.append((other, a, int(rng.integers(a, b + 1)), 0))
        for _ in range(rng.integers(0, 60)):
            a = int(rng.integers(t, end + 20))          # sometimes before or across the step
            b = a + int(rng.integers(0, 15))
            name = NAMES[rng.integers(len(NAMES))]
            events.append((name, a, b, int(rng.integers(-64, 256)) if name == "[memory]" else 0))
        t = end + int(rng.integers(0, 30))
    rng.shuffle(events)
    return events


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_array_counts_follow_the_rule_event_by_event(device):
    rng = np.random.default_rng(7)
    for _ in range(300):
        events = _trace(rng)
        got = count_per_step(events, phases.STEP_LABEL, phases.PHASE_LABELS, device)
        assert got == _reference(events, phases.STEP_LABEL, phases.PHASE_LABELS, device)


def test_no_events_no_steps_and_no_phase_ranges():
    assert count_per_step([], phases.STEP_LABEL, phases.PHASE_LABELS) == []
    [row] = count_per_step([(phases.STEP_LABEL, 0, 10, 0), ("aten::mm", 2, 3, 0)],
                           phases.STEP_LABEL, phases.PHASE_LABELS)
    assert row["ops"] == 1 and all(row[f"events_{p}"] == 0 for p in phases.PHASE_LABELS)
