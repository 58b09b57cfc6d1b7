"""Kernel launches per step and phase (profiler.count_per_step on CUDA) and the check that
judges them side against side (counts.launches_vs_baseline): one more Triton kernel a
decode step is no aten op, so only a launch count sees it."""
from mrbench.contract import SideResult
from mrbench.harness.checks.compare import compare
from mrbench.harness.measure import phases
from mrbench.harness.measure.profiler import count_per_step
from mrbench.harness.record.suite import Thresholds

TH = Thresholds(latency_metrics=[])
L = phases.PHASE_LABELS


def _step(t: int, extra_triton: bool = False) -> list[tuple[str, int, int, int]]:
    """One step: prepare launches a runtime kernel and a Triton kernel (driver), forward
    replays a CUDA graph, sample launches a runtime kernel that itself calls the driver."""
    ev = [(phases.STEP_LABEL, t, t + 100, 0),
          (L["prepare"], t + 1, t + 20, 0), ("aten::copy_", t + 2, t + 5, 0),
          ("cudaLaunchKernel", t + 3, t + 4, 0), ("cuLaunchKernel", t + 6, t + 7, 0),
          (L["forward"], t + 21, t + 50, 0), ("cudaGraphLaunch", t + 22, t + 30, 0),
          (L["sample"], t + 51, t + 80, 0), ("aten::argmax", t + 52, t + 60, 0),
          ("cudaLaunchKernel", t + 53, t + 58, 0), ("cuLaunchKernel", t + 54, t + 55, 0),
          (L["postprocess"], t + 81, t + 90, 0), (L["output"], t + 91, t + 99, 0)]
    if extra_triton:                       # a Triton kernel: a driver call, no aten op
        ev.append(("cuLaunchKernel", t + 10, t + 11, 0))
    return ev


def _rows(device: str = "cuda", extra: bool = False, steps: int = 3) -> list[dict]:
    events = [e for i in range(steps) for e in _step(i * 200, extra)]
    return count_per_step(events, phases.STEP_LABEL, L, device)


def test_launches_are_counted_per_phase_and_graph_replays_apart():
    [row, *_] = _rows()
    assert row["launches_prepare"] == 2                   # runtime + Triton's driver call
    assert row["launches_sample"] == 1                    # the driver call inside is its own
    assert row["launches_forward"] == 0 and row["graph_launches_forward"] == 1
    assert row["launches"] == 3 and row["graph_launches"] == 1


def test_on_cpu_no_launch_column_is_written():
    assert not any(k.startswith(("launches", "graph_launches")) for k in _rows("cpu")[0])


def _side(rows: list[dict], device: str = "cuda") -> SideResult:
    return SideResult(profile=rows, resolved=dict(target="vllm", runner="v2", device=device))


def _check(base: SideResult, cand: SideResult):
    return next(c for c in compare("w", base, cand, TH) if c.metric == "launches_vs_baseline")


def test_one_more_triton_kernel_a_step_fails_launches_but_not_ops():
    base, cand = _side(_rows()), _side(_rows(extra=True))
    checks = {c.metric: c for c in compare("w", base, cand, TH)}
    c = checks["launches_vs_baseline"]
    assert c.verdict == "regression" and c.delta == 1.0
    assert "launches_prepare 2.0 -> 3.0" in c.note
    assert checks["ops_vs_baseline"].verdict == "pass"      # no aten op was added
    assert _check(base, _side(_rows())).verdict == "pass"


def test_launches_on_cpu_are_not_measured_never_a_pass():
    c = _check(_side(_rows("cpu"), "cpu"), _side(_rows("cpu"), "cpu"))
    assert c.verdict == "info" and c.note.startswith("not measured: no CUDA")


def test_another_batch_sequence_is_reported_not_judged():
    c = _check(_side(_rows(steps=3)), _side(_rows(extra=True, steps=4)))
    assert c.verdict == "info" and "not the same batch sequence" in c.note


def test_runners_that_differ_report_launches_only():
    base = SideResult(profile=_rows(), resolved=dict(target="vllm", runner="v1"))
    checks = {c.metric: c for c in compare("w", base, _side(_rows(extra=True)), TH)}
    assert "launches_vs_baseline" not in checks
    assert checks["launches_per_step"].verdict == "info"
