"""The harness's own phase ranges and what the count checks make of them.

A runner's phases are ranges the harness puts around the runner's own methods
(harness/measure/phases.py); the counters attribute each event to the innermost range; a check
whose phases never ran says "not measured" (an error row, never a pass); on CUDA a sync is
the host waiting for the device, not a host-side `.item()`."""
import torch

from mrbench.contract import SideResult
from mrbench.harness.checks.counts import not_measured, sync_check, sync_warnings_check
from mrbench.harness.measure import phases
from mrbench.harness.measure.profiler import count_per_step, profiled
from mrbench.harness.record.run_record import Check, overall_verdict
from mrbench.harness.record.suite import Thresholds


class ToyModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)

    def compute_logits(self, h):
        return h * 2


class Out:
    def __init__(self, t):
        self.t = t

    def get_output(self):
        return self.t.sum().item()           # the host wait, as V2's AsyncOutput


class ToyRunner:
    """Shaped like vLLM V1's runner: execute_model calls the forward and the logits,
    sample_tokens samples, bookkeeps and returns an async output."""

    def __init__(self) -> None:
        self.model = ToyModel()

    def execute_model(self, x):
        x = x + 1                             # prepare
        h = self._model_forward(x)
        self.logits = self.model.compute_logits(h)

    def _model_forward(self, x):
        return self.model(x)

    def _sample(self, logits):
        return logits.argmax(-1)

    def sample_tokens(self):
        s = self._sample(self.logits)
        return Out(s * 1)                     # postprocess


def _step(runner):
    with torch.profiler.record_function(phases.STEP_LABEL):
        runner.execute_model(torch.ones(2, 4))
        out = runner.sample_tokens()
        out.get_output()


def test_install_wraps_the_runners_own_methods_and_reports_what_is_missing():
    r = ToyRunner()
    original = ToyRunner.__dict__["execute_model"]
    probe = phases.install(r, phases.VLLM_V1 + (("forward", "no_such.method"),))
    assert probe.missing == ["no_such.method"]
    assert set(probe.attached) == {"prepare", "forward", "sample", "postprocess", "output"}
    assert "execute_model" in vars(r)                   # on the instance, not the class
    assert ToyRunner.__dict__["execute_model"] is original


def test_each_event_counts_for_its_innermost_phase_and_every_phase_is_seen_to_run():
    r = ToyRunner()
    phases.install(r, phases.VLLM_V1)
    _step(r)                                            # not profiled: no ranges, no cost
    with profiled("cpu") as prof:
        for _ in range(3):
            _step(r)
    rows = count_per_step(prof.events, phases.STEP_LABEL, phases.PHASE_LABELS, "cpu")
    assert len(rows) == 3
    for row in rows:
        for p in phases.PHASES:
            assert row[f"ran_{p}"] >= 1, p
        assert row["ops_forward"] > 0 and row["ops_prepare"] >= 1   # add in prepare, linear in forward
        assert row["syncs_output"] == 1 and row["syncs_hot"] == 0  # .item() in get_output only
        assert row["ops_sample"] >= 2            # compute_logits (inside execute_model) + argmax


def test_a_module_call_is_labelled_through_hooks():
    r = ToyRunner()
    probe = phases.install(r, (("forward", "model()"),))
    assert probe.attached == {"forward": ["model()"]}
    with profiled("cpu") as prof:
        with torch.profiler.record_function(phases.STEP_LABEL):
            r.model(torch.ones(1, 4))
    [row] = count_per_step(prof.events, phases.STEP_LABEL, phases.PHASE_LABELS, "cpu")
    assert row["ran_forward"] == 1 and row["ops_forward"] > 0


def _ev(name, t0, t1):
    return (name, t0, t1, 0)


def test_on_cuda_a_sync_is_the_host_waiting_for_the_device_not_a_host_item():
    step = _ev(phases.STEP_LABEL, 0, 100)
    prep = _ev(phases.PHASE_LABELS["prepare"], 10, 50)
    events = [step, prep, _ev("aten::_local_scalar_dense", 20, 21),   # .item() of a CPU tensor
              _ev("aten::item", 19, 22), _ev("cudaStreamSynchronize", 30, 31)]
    [cuda] = count_per_step(events, phases.STEP_LABEL, phases.PHASE_LABELS, "cuda")
    [cpu] = count_per_step(events, phases.STEP_LABEL, phases.PHASE_LABELS, "cpu")
    assert cuda["syncs_prepare"] == 1 and cuda["aten::_local_scalar_dense"] == 1
    assert cpu["syncs_prepare"] == 2          # on CPU the op stands in for a device read


def test_nested_ranges_of_one_phase_do_not_hide_events_between_them():
    step = _ev(phases.STEP_LABEL, 0, 100)
    outer = _ev(phases.PHASE_LABELS["forward"], 10, 90)
    inner = _ev(phases.PHASE_LABELS["forward"], 20, 30)
    prep = _ev(phases.PHASE_LABELS["prepare"], 0, 95)
    events = [step, prep, outer, inner, _ev("aten::mm", 50, 60), _ev("aten::add", 92, 93)]
    [row] = count_per_step(events, phases.STEP_LABEL, phases.PHASE_LABELS, "cpu")
    assert row["ops_forward"] == 1 and row["ops_prepare"] == 1


def _side(profile, **resolved):
    return SideResult(profile=profile, resolved=dict(runner_class="Toy", **resolved))


def _rows(ran_forward=1, syncs=0, n=3):
    base = {f"ran_{p}": 1 for p in phases.PHASES} | {f"syncs_{p}": 0 for p in phases.PHASES}
    return [dict(base, ran_forward=ran_forward, syncs_hot=syncs, ops=5, allocs=1)
            for _ in range(n)]


def test_phases_that_never_ran_make_the_count_checks_not_measured_errors():
    th = Thresholds()
    dead = _side(_rows(ran_forward=0), phase_probe=dict(attached={}, missing=["model()"]))
    why = not_measured(dead, "candidate")
    assert why.startswith("not measured") and "forward" in why and "model()" in why
    c = sync_check("w", _side(_rows()), dead, th)
    assert c.verdict == "error" and c.note.startswith("not measured")
    assert overall_verdict([c], []) == ("error", 3)
    ok = sync_check("w", _side(_rows()), _side(_rows()), th)
    assert ok.verdict == "pass" and ok.candidate == 0       # zero, measured
    assert sync_check("w", _side(_rows()), _side(_rows(syncs=1)), th).verdict == "regression"
    assert not_measured(_side([]), "baseline").startswith("not measured: no profiled step")


def _warn_side(warnings, steps=10, armed=1.0, sync_free=True):
    return SideResult(counters=dict(sync_check_warnings=warnings, sync_check_steps=steps,
                                    sync_check_armed=armed),
                      resolved=dict(sync_free=sync_free, sync_check_sites={"f.py:1": 1}))


def test_vllms_sync_checker_warnings_gate_the_candidate():
    th = Thresholds()
    assert sync_warnings_check("w", SideResult(), SideResult(), th) is None   # not asked for
    clean = sync_warnings_check("w", _warn_side(0), _warn_side(0), th)
    assert clean.verdict == "pass" and clean.candidate == 0
    hit = sync_warnings_check("w", _warn_side(0), _warn_side(10), th)
    assert hit.verdict == "regression" and hit.candidate == 1.0 and "f.py:1" in hit.note
    # a V1 candidate (A/A) is held to its baseline, not to the sync-free budget
    aa = sync_warnings_check("w", _warn_side(10, sync_free=False),
                             _warn_side(10, sync_free=False), th)
    assert aa.verdict == "pass"
    unarmed = sync_warnings_check("w", _warn_side(0), _warn_side(0, armed=0.0), th)
    assert unarmed.verdict == "error" and "never armed" in unarmed.note


def test_error_checks_fail_the_run_but_info_does_not():
    info = Check("w", "m", "", None, None, None, None, None, "-", "-", "info")
    assert overall_verdict([info], []) == ("pass", 0)


def test_the_bundled_runners_are_labelled_by_the_harness_not_by_themselves():
    """runner_impl emits no profiler ranges; `label_phases` puts the harness's around each
    runner's phase methods, and then every phase of every step is seen to run."""
    from mrbench.harness.run.targets.bundled import label_phases
    from mrbench.runner_impl import LLM, SamplingParams
    for runner in ("v2", "v1"):
        llm = LLM(None, runner=runner, max_num_seqs=2, num_speculative_tokens=1)
        sp = SamplingParams(temperature=0, max_tokens=8)
        prompts = ["Question: 2+3?\nAnswer:", "Question: 7-4?\nAnswer:"]
        with profiled("cpu") as bare:
            llm.generate(prompts, sp)
        assert not any(n.startswith("mrbench::") for n, *_ in bare.events)
        probe = label_phases(llm)
        assert probe.missing == [] and set(probe.attached) >= {"step", *phases.HOT_PHASES}
        with profiled("cpu") as prof:
            llm.generate(prompts, sp)
        rows = count_per_step(prof.events, phases.STEP_LABEL, phases.PHASE_LABELS, "cpu")
        assert rows, runner
        for p in phases.HOT_PHASES:
            assert all(r[f"ran_{p}"] == 1 for r in rows), (runner, p)
