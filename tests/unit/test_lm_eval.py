"""lm-eval integration: the "mrbench" model, the local GSM8K task, and `--scorer lm-eval`.

- the real `mrbench-lm-eval` CLI (lm-eval's own CLI with the model registered) evaluates the
  bundled model on 20 generated problems offline, and mrbench's scorer, run on the responses
  lm-eval logged, gives the same strict/flexible score for every sample and in the mean;
- lm-eval's filters + exact_match (scorer "lm-eval") and mrbench's (scorer "mrbench") agree
  sample by sample on real GSM8K answers, perturbed answers and awkward strings;
- the model honours until/max_gen_toks, refuses sampling, computes log-likelihoods that
  match transformers, and rejects bad model_args with one clear line.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

lm_eval = pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402

from mrbench.harness.run.targets.bundled.lm_eval import MRBenchLM  # noqa: E402
from mrbench.workloads.gsm8k_problems import HELD_OUT_SEEDS  # noqa: E402
from mrbench.workloads.gsm8k_problems import main as write_problems  # noqa: E402
from mrbench.workloads.gsm8k_scoring import FALLBACK, PROMPT, STOP, score, score_all  # noqa: E402
from mrbench.workloads.lm_eval_gsm8k import TASK_NAME, TASKS_DIR, load_task  # noqa: E402

BIN = Path(sys.executable).parent


def _offline_env(tmp_path: Path) -> dict:
    return {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
            "HF_HOME": str(tmp_path / "hf"), "TOKENIZERS_PARALLELISM": "false"}


# ---- (a) the real CLI, offline, scored both ways ------------------------------------------
def test_cli_scores_equal_mrbench_scorer(tmp_path):
    data = tmp_path / "generated.jsonl"
    assert write_problems(["--write", str(data), "--seed", str(HELD_OUT_SEEDS[0]),
                           "--limit", "20"]) == 0
    exe = BIN / "mrbench-lm-eval"
    assert exe.is_file(), "mrbench-lm-eval is missing: reinstall the project (pip install -e .)"
    out = tmp_path / "out"
    cmd = [str(exe), "--model", "mrbench", "--model_args", "runner=v2",
           "--tasks", TASK_NAME, "--include_path", str(TASKS_DIR),
           "--metadata", f"data_file={data}", "--limit", "20",
           "--log_samples", "--output_path", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env=_offline_env(tmp_path), cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    results = json.loads(next(out.rglob("results_*.json")).read_text())
    assert results["config"]["mrbench_runner"] == "v2"
    lm = results["results"][TASK_NAME]
    samples = [json.loads(x) for x in
               next(out.rglob(f"samples_{TASK_NAME}_*.jsonl")).read_text().splitlines()]
    by_filter = {f: [s for s in samples if s["filter"] == f]
                 for f in ("strict-match", "flexible-extract")}
    problems = [json.loads(x) for x in data.read_text().splitlines()]
    for f, rows in by_filter.items():
        assert sorted(s["doc_id"] for s in rows) == list(range(20))
        ours = []
        for s in rows:
            doc = problems[s["doc_id"]]
            assert s["doc"]["answer"] == doc["answer"]
            ((prompt, gen_kwargs),) = [tuple(a.values()) for a in s["arguments"].values()]
            assert prompt == PROMPT.format(question=doc["question"])    # mrbench's prompt
            assert gen_kwargs["until"] == list(STOP)
            ((response,),) = s["resps"]
            assert not any(stop in response for stop in STOP)
            m = score(response, doc["answer"])
            ok, extracted = (m.strict, m.strict_answer) if f == "strict-match" \
                else (m.flexible, m.flexible_answer)
            assert s["filtered_resps"] == [extracted]                 # same extraction
            assert bool(s["exact_match"]) == ok, (f, s["doc_id"], response)
            ours.append(ok)
        assert lm[f"exact_match,{f}"] == pytest.approx(sum(ours) / len(ours))
    # the bundled model reads generated problems well: a non-trivial score
    assert lm["exact_match,strict-match"] >= 0.8


# ---- (b) scorer "lm-eval" == scorer "mrbench", sample by sample ---------------------------
AWKWARD = [
    ("She has 3+4 = <<3+4=7>>7 apples.\n#### 7", "#### 7"),
    ("#### 1,234.", "blah\n#### 1234"),
    ("It costs $5 and then $12.50 total", "#### 12.50"),
    ("#### -3 and later 9", "#### 9"),
    ("no numbers here", "#### 1"),
    ("#### 5\n#### 6", "#### 5"),
    ("answer 7", "#### 7"),
    ("", "#### 0"),
    ("The answer is $1,000.", "#### 1000"),
    ("#### 12Question: x", "#### 12"),
]


def _same(ours, theirs):
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a == b, (i, a, b)


def test_lm_eval_scorer_matches_on_awkward_strings():
    responses, refs = zip(*AWKWARD)
    ours = score_all(responses, refs, "mrbench")
    _same(ours, score_all(responses, refs, "lm-eval"))
    assert ours[4].strict_answer == FALLBACK


def test_lm_eval_scorer_matches_on_real_gsm8k(data_dir):
    rows = [json.loads(x) for x in (data_dir / "gsm8k" / "test.jsonl").read_text().splitlines()]
    rng = random.Random(0)
    responses, refs, questions = [], [], []
    for r in rows:
        ans = r["answer"]
        final = ans.rsplit("#### ", 1)[1]
        wrong = ans[: -len(final)] + str(int(final.replace(",", "")) + rng.randint(1, 9))
        for resp in (ans, wrong, ans.rsplit("####", 1)[0]):   # right, wrong, no marker
            responses.append(resp)
            refs.append(ans)
            questions.append(r["question"])
    ours = score_all(responses, refs, "mrbench")
    _same(ours, score_all(responses, refs, "lm-eval", questions))
    assert sum(s.strict for s in ours) == len(rows)          # the references score themselves


def test_task_prompts_are_mrbench_prompts(data_dir):
    rows = [json.loads(x) for x in
            (data_dir / "gsm8k" / "test.jsonl").read_text().splitlines()[:50]]
    task = load_task(docs=rows)
    task.build_all_requests(limit=None, rank=0, world_size=1)
    assert [i.args[0] for i in task.instances] == \
        [PROMPT.format(question=r["question"]) for r in rows]


def test_task_yaml_is_lm_evals_gsm8k_but_zero_shot():
    """Everything that decides a score is copied from the installed lm-eval's gsm8k.yaml."""
    from lm_eval.tasks._yaml_loader import load_yaml
    ours = load_yaml(TASKS_DIR / "gsm8k_local.yaml", resolve_func=False)
    theirs = load_yaml(Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml",
                       resolve_func=False)
    for key in ("output_type", "doc_to_text", "doc_to_target", "metric_list",
                "generation_kwargs", "repeats", "filter_list", "metadata"):
        assert ours[key] == theirs[key], key
    assert ours["task"] == TASK_NAME and ours["num_fewshot"] == 0
    assert tuple(ours["generation_kwargs"]["until"]) == STOP


def test_task_reads_a_local_jsonl(tmp_path, monkeypatch):
    import datasets  # read its cache dir at import: patch the value
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    data = tmp_path / "p.jsonl"
    write_problems(["--write", str(data), "--limit", "3"])
    task = load_task(data_file=str(data))
    assert [d["question"] for d in task.eval_docs] == \
        [json.loads(x)["question"] for x in data.read_text().splitlines()]
    with pytest.raises(FileNotFoundError, match="--metadata data_file=PATH"):
        load_task(data_file=str(tmp_path / "missing.jsonl"))


def test_workload_scorer_param_swaps_the_scorer():
    from mrbench.workloads.gsm8k import GSM8K, Item, Params
    assert Params().scorer == "mrbench" and Params(scorer="lm-eval").scorer == "lm-eval"
    with pytest.raises(ValueError):
        Params(scorer="sklearn")
    items = [Item("q", ref) for _, ref in AWKWARD]
    run_idx = list(range(len(items) - 1))                     # the last one did not fit
    comps = [SimpleNamespace(text=t, token_ids=[1]) for t, _ in AWKWARD[:-1]]
    rows = []
    for scorer in ("mrbench", "lm-eval"):
        res = SimpleNamespace(requests=[{"req_index": i} for i in run_idx], itl=[])
        GSM8K._score(res, comps, items, run_idx, scorer)
        rows.append(res.requests)
    assert rows[0] == rows[1]
    assert rows[0][-1]["fits_context"] is False and rows[0][-1]["correct_strict"] is False
    assert [r["correct_strict"] for r in rows[0][:-1]] == \
        [score(t, a).strict for t, a in AWKWARD[:-1]]


# ---- the model, in process, on the tiny random model --------------------------------------
@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    # float64: a random-weight model has near-ties that float32 batch shapes can flip
    return MRBenchLM(model=str(tiny_model_dir), dtype="float64", max_num_seqs=4)


def _gen(ctx, **gen_kwargs):
    return Instance("generate_until", {}, (ctx, gen_kwargs), 0)


def test_generate_until_honours_until_and_max_gen_toks(lm):
    from mrbench.runner_impl import SamplingParams
    ctxs = ["Question: a b c\nAnswer:", "hello world", "x" * 30, "The cat sat on"]
    full = [o.text for o in lm.llm.generate(ctxs, SamplingParams(temperature=0, max_tokens=40))]
    stops = ["e", "a"]
    reqs = [_gen(c, until=stops, max_gen_toks=40, do_sample=False, temperature=0.0)
            for c in ctxs] + [_gen(c, until=[], max_gen_toks=7) for c in ctxs]
    got = lm.generate_until(reqs)
    for text, g in zip(full, got[:4]):
        cut = min([text.find(s) for s in stops if s in text], default=len(text))
        assert g == text[:cut]
    assert any(len(g) < len(t) for g, t in zip(got[:4], full))     # a stop string did cut
    short = [o.text for o in lm.llm.generate(ctxs, SamplingParams(temperature=0, max_tokens=7))]
    assert got[4:] == short


def test_generate_until_refuses_sampling(lm):
    for kw in (dict(do_sample=True), dict(temperature=0.7), dict(do_sample=True,
                                                                 temperature=1.0)):
        with pytest.raises(ValueError, match="only greedy decoding"):
            lm.generate_until([_gen("hi", until=["\n"], **kw)])
    with pytest.raises(ValueError, match="unsupported gen_kwargs"):
        lm.generate_until([_gen("hi", until=["\n"], repetition_penalty=1.2)])


def _hf_logprobs(model_dir, ids):
    from transformers import AutoModelForCausalLM
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64,
                                              attn_implementation="eager")
    with torch.no_grad():
        return torch.log_softmax(hf(torch.tensor([ids])).logits[0], -1)


def test_loglikelihood_matches_transformers(lm, tiny_model_dir):
    ctx, cont = "Question: 2+3\nAnswer:", " 5 apples"
    (ll, greedy), (ll_empty, _) = lm.loglikelihood(
        [Instance("loglikelihood", {}, (ctx, cont), 0),
         Instance("loglikelihood", {}, ("", cont), 0)])
    ids = lm.tok_encode(ctx + cont)
    n_ctx = len(lm.tok_encode(ctx))
    ref = _hf_logprobs(tiny_model_dir, ids)
    cont_ids = torch.tensor(ids[n_ctx:])
    expect = ref[n_ctx - 1:-1].gather(1, cont_ids[:, None]).sum().item()
    assert ll == pytest.approx(expect, rel=1e-6)
    assert greedy == bool((ref[n_ctx - 1:-1].argmax(-1) == cont_ids).all())
    # empty context: conditioned on the prefix token (BOS), as loglikelihood_rolling is
    (rolling,) = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (cont,), 0)])
    assert rolling == pytest.approx(ll_empty, abs=1e-9)
    plain = lm.tok_encode(cont, add_special_tokens=False)
    ref = _hf_logprobs(tiny_model_dir, [lm.prefix_token_id] + plain)
    assert rolling == pytest.approx(
        ref[:-1].gather(1, torch.tensor(plain)[:, None]).sum().item(), rel=1e-6)


def test_loglikelihood_rolling_windows_cover_long_text(tiny_model_dir):
    short = MRBenchLM(model=str(tiny_model_dir), dtype="float64", max_model_len=32)
    text = "the quick brown fox jumps over the lazy dog " * 3         # > 32 tokens
    (ll,) = short.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
    toks = short.tok_encode(text, add_special_tokens=False)
    expect = 0.0
    for c, p in map(make_disjoint_window, get_rolling_token_windows(
            token_list=toks, prefix_token=short.prefix_token_id, max_seq_len=32,
            context_len=1)):
        ref = _hf_logprobs(tiny_model_dir, (c + p)[:-1])
        expect += ref[-len(p):].gather(1, torch.tensor(p)[:, None]).sum().item()
    assert ll == pytest.approx(expect, rel=1e-6)


# ---- (c) model_args ---------------------------------------------------------------------
def test_registered_in_lm_eval_and_device_fallback(tiny_model_dir):
    from lm_eval.api.registry import get_model, model_registry
    cls = get_model("mrbench")
    assert cls is MRBenchLM
    assert {"hf", "vllm", "dummy"} <= set(model_registry)    # built-ins are still listed
    m = cls.create_from_arg_obj({"model": str(tiny_model_dir), "faults": "stale-slot-state"},
                                {"batch_size": 1, "max_batch_size": None, "device": "cuda:0"})
    assert sorted(m.llm.config.faults.names) == ["stale-slot-state"]
    if not torch.cuda.is_available():
        assert m.llm.config.device == "cpu"                   # lm-eval's default cuda:0


@pytest.mark.parametrize("args,message", [
    ("runner=v3", "runner must be one of"),
    ("model=/nonexistent/model/dir", "model path does not exist"),
    ("runner=v1,faults=stale-slot-state", "fault switches exist only in the v2 runner"),
    ("faults=no-such-fault", "unknown fault 'no-such-fault'"),
    ("max_num_seqs=0", "max_num_seqs must be >= 1"),
    ("max_gen_toks=0", "max_gen_toks must be an integer >= 1"),
    ("flux_capacitor=1", "unknown LLM argument 'flux_capacitor'"),
])
def test_bad_model_args_give_one_clear_error(args, message):
    from lm_eval.api.registry import get_model
    with pytest.raises(ValueError, match="^mrbench model_args: .*" + message) as e:
        get_model("mrbench").create_from_arg_string(args, {"device": "cpu"})
    assert e.value.__cause__ is None and "\n" not in str(e.value)


def test_model_dir_without_config_is_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="config.json not found"):
        MRBenchLM(model=str(tmp_path / "empty"))


def test_the_scorer_flag_reaches_the_gsm8k_workload():
    """`mrbench run gsm8k --scorer lm-eval` sets the workload's scorer (and only where a
    workload has one: a suite without GSM8K refuses the flag)."""
    from mrbench.contract import BadInput
    from mrbench.harness.cli import _parser
    from mrbench.harness.commands.common import suite_and_sides
    from mrbench.harness.run.orchestrate import Overrides
    from mrbench.workloads import get_workload
    a = _parser().parse_args(["run", "gsm8k", "--scorer", "lm-eval"])
    suite, _, _, ov = suite_and_sides(a)
    fields = set(get_workload("gsm8k").Params.model_fields)
    assert ov.apply(suite.workloads[0].params, fields)["scorer"] == "lm-eval"
    assert Overrides(scorer="lm-eval").unused([{"limit"}]) == ["scorer"]
    with pytest.raises(BadInput):
        _parser().parse_args(["run", "gsm8k", "--scorer", "nope"])
