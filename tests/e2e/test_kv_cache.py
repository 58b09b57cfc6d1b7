"""Preemption and prefix caching end to end on the bundled model (CPU): surface's two
entries, `preemption` (17 KV blocks of 32 tokens for 8 GSM8K prompts: the scheduler
preempts and resumes) and `prefix-cache` (one-shot prompts sharing a preamble, asked twice,
caching on). Clean, both pass with preemptions and hits on both sides; each coverage fault
is caught by token agreement on its own entry and nowhere else."""
import pytest
from support.side_by_side import run_variants

pytestmark = pytest.mark.slow

ENTRIES = "surface:preemption,prefix-cache"


FAULTS = [("resumed-prefill-len", "preemption"), ("prefix-hit-slot-mapping", "prefix-cache")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The clean run and one run per fault, side by side (support.side_by_side: they judge
    tokens, coverage and audits, never time): name -> (exit code, summary, checks)."""
    runs = run_variants(tmp_path_factory.mktemp("kv"), ENTRIES,
                        {"clean": [], **{f: ["--fault", f] for f, _ in FAULTS}},
                        in_process=True)
    return {name: (r.code, r.summary,
                   {(c["workload"], c["metric"]): c for c in r.summary["checks"]})
            for name, r in runs.items()}


def test_clean_run_preempts_hits_the_cache_and_passes(runs):
    code, summary, checks = runs["clean"]
    assert code == 0 and summary["verdict"] == "pass", summary["failures"]
    for wl in ("preemption", "prefix-cache"):
        assert checks[(wl, "token_agreement")]["candidate"] == 1.0
        assert checks[(wl, "state_audit_violations")]["verdict"] == "pass"
    pre = checks[("preemption", "preemption_coverage")]
    assert pre["verdict"] == "pass" and pre["baseline"] >= 1 and pre["candidate"] >= 1
    hit = checks[("prefix-cache", "prefix_cache_coverage")]
    assert hit["verdict"] == "pass" and hit["candidate"] > 0
    for s in ("baseline", "candidate"):
        side = summary["metrics"]["prefix-cache"][s]
        assert side["prefix_cache_hits"] == hit[s]
        assert side["prefix_cache_hit_rate"] == side["prefix_cache_hits"] / \
            side["prefix_cache_queries"] > 0.3
        assert summary["metrics"]["preemption"][s]["num_preemptions"] == pre[s]


@pytest.mark.parametrize("fault,entry", FAULTS)
def test_each_fault_is_caught_by_its_own_entry_only(runs, fault, entry):
    code, summary, checks = runs[fault]
    assert code == 1 and summary["verdict"] == "regression", summary["failures"]
    caught = {k for k, c in checks.items() if c["verdict"] == "regression"}
    assert caught == {(entry, "token_agreement")}
