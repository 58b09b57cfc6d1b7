"""The logprobs workload end to end on the bundled model (CPU, float32), as the `surface`
suite runs it (`surface:logprobs`: logprobs.raw greedy, logprobs.processed at T 2 with
top-k 8, top 5 (+1) logprobs). Clean V2 agrees with V1 at every compared position; V2 with
`processed-logprobs-unmasked` (processed logprobs before the top-k mask) samples the same
tokens, so only `logprobs.processed/logprobs_agreement` fails. And no other fault trips
`logprobs_agreement` on this workload's shape (runner level, the harness's own check)."""
import json
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
import torch
from support.side_by_side import run_variants

from mrbench.contract import SideResult, TokenLogprob
from mrbench.harness.checks.logprobs import logprobs_check
from mrbench.harness.record.suite import load_suite
from mrbench.runner_impl import LLM, SamplingParams
from mrbench.runner_impl.faults import KNOWN_FAULTS
from mrbench.workloads.gsm8k_scoring import PROMPT, STOP
from mrbench.workloads.logprobs import MODES, Params, encode
from mrbench.workloads.logprobs import WORKLOAD as LOGPROBS

pytestmark = pytest.mark.slow

FAULT = "processed-logprobs-unmasked"


@pytest.fixture(scope="module", autouse=True)
def runs(tmp_path_factory):
    """The clean run and the fault run, side by side (support.side_by_side: they judge
    logprobs and tokens, never time), started in the background as the module starts: the
    runner-level sweep (test_no_other_fault_trips_it, first) computes meanwhile, on one
    thread. Yields a function that waits for them: name -> (exit code, summary, checks,
    results)."""
    root = tmp_path_factory.mktemp("logprobs")
    with ThreadPoolExecutor(1) as pool:
        made = pool.submit(run_variants, root, "surface:logprobs",
                           {"clean": [], "fault": ["--fault", FAULT]}, in_process=True)

        def get(name: str):
            r = made.result()[name]
            return (r.code, r.summary,
                    {(c["workload"], c["metric"]): c for c in r.summary["checks"]}, r.path)
        yield get


@contextmanager
def one_thread():
    """torch on one thread in this process while the module's runs use the other core:
    two runnable OpenMP threads each on a core that is busy slow down several-fold."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def _side(outs, top_n: int) -> SideResult:
    """The rows the workload writes, from a runner's outputs."""
    rows = [dict(req_index=i, logprobs_top_n=top_n, logprobs=encode(
        [TokenLogprob(x.logprob, x.rank, x.top) for x in o.outputs[0].logprobs]))
        for i, o in enumerate(outs)]
    return SideResult(requests=rows, tokens=[o.token_ids for o in outs],
                      resolved=dict(dtype="float32"))


@pytest.mark.parametrize("mode", ["raw", "processed"])
def test_no_other_fault_trips_it(mode):
    """Every other switch of the bundled V2 on logprobs.<mode>'s shape (surface's params):
    logprobs_agreement against V1 passes and compares positions."""
    entry = next(w for w in load_suite("surface:logprobs").workloads)
    p = Params(**entry.params).model_copy(update=dict(mode=mode))
    prompts = [PROMPT.format(question=it.question) for it in LOGPROBS.prepare(p)]
    if mode == "raw":
        sps = [SamplingParams(temperature=0.0, max_tokens=p.max_tokens, stop=list(STOP),
                              logprobs=p.top_n + 1)] * len(prompts)
    else:
        sps = [SamplingParams(temperature=p.temperature, top_k=p.top_k,
                              seed=p.sampling_seed + i, max_tokens=p.max_tokens,
                              stop=list(STOP), logprobs=p.top_n + 1)
               for i in range(len(prompts))]
    shape = dict(max_num_seqs=p.max_num_seqs, max_num_batched_tokens=p.max_num_batched_tokens,
                 logprobs_mode=MODES[mode], warmup=False)
    with one_thread():
        base = _side(LLM(runner="v1", **shape).generate(prompts, sps), p.top_n)
        for fault in sorted(set(KNOWN_FAULTS) - {FAULT}):
            cand = _side(LLM(runner="v2", faults=[fault], **shape).generate(prompts, sps),
                         p.top_n)
            c = logprobs_check(f"logprobs.{mode}", base, cand)
            assert c.verdict.value == "pass", (fault, c.note)


def test_clean_v2_returns_v1s_logprobs(runs):
    code, summary, checks, path = runs("clean")
    assert code == 0 and summary["verdict"] == "pass", summary["failures"]
    for entry in ("logprobs.raw", "logprobs.processed"):
        c = checks[(entry, "logprobs_agreement")]
        assert c["verdict"] == "pass" and c["candidate"] == 0, c
        compared = int(c["note"].split(" positions compared")[0])
        assert compared >= 12 * 16, c["note"]         # most of 12 requests x 32 tokens
        assert checks[(entry, "token_agreement")]["candidate"] == 1.0
    manifest = json.loads((path / "manifest.json").read_text())
    engine = manifest["resolved"]["logprobs.processed"]["candidate"]["engine"]
    assert engine["logprobs_mode"] == "processed_logprobs"


def test_the_fault_is_caught_by_logprobs_agreement_only(runs):
    code, summary, checks, _ = runs("fault")
    assert code == 1 and summary["verdict"] == "regression", summary["failures"]
    failed = sorted(k for k, c in checks.items() if c["verdict"] == "regression")
    assert failed == [("logprobs.processed", "logprobs_agreement")], failed
    assert checks[("logprobs.processed", "token_agreement")]["candidate"] == 1.0
    c = checks[("logprobs.processed", "logprobs_agreement")]
    assert c["candidate"] >= 12 * 16, c["note"]       # nearly every position moved
