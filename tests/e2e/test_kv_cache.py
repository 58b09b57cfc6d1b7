"""Preemption and prefix caching end to end on the bundled model (CPU): surface's two
entries, `preemption` (17 KV blocks of 32 tokens for 8 GSM8K prompts: the scheduler
preempts and resumes) and `prefix-cache` (one-shot prompts sharing a preamble, asked twice,
caching on). Clean, both pass with preemptions and hits on both sides; each coverage fault
is caught by token agreement on its own entry and nowhere else."""
import json

import pytest

from mrbench.harness.cli import main

pytestmark = pytest.mark.slow

ENTRIES = "surface:preemption,prefix-cache"


def run(out, *args):
    code = main(["run", ENTRIES, "--out", str(out), *args])
    summary = json.loads((out / "summary.json").read_text())
    return code, summary, {(c["workload"], c["metric"]): c for c in summary["checks"]}


def test_clean_run_preempts_hits_the_cache_and_passes(tmp_path):
    code, summary, checks = run(tmp_path / "clean")
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


@pytest.mark.parametrize("fault,entry", [("resumed-prefill-len", "preemption"),
                                         ("prefix-hit-slot-mapping", "prefix-cache")])
def test_each_fault_is_caught_by_its_own_entry_only(tmp_path, fault, entry):
    code, summary, checks = run(tmp_path / fault, "--fault", fault)
    assert code == 1 and summary["verdict"] == "regression", summary["failures"]
    caught = {k for k, c in checks.items() if c["verdict"] == "regression"}
    assert caught == {(entry, "token_agreement")}
