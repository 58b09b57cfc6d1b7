"""The sampling sweep end to end on the bundled model (CPU), as the `surface` suite runs it
(its `sampled` entry: one entry per parameter set, five of the ten here). The clean V2
samples what V1 samples in every set; each sampling fault is caught, and only by its own
set's entry: the penalties'
stale per-slot counts by `sampled.penalties`, a seeded stream shifted by a dropped
partial-prefill draw by `sampled.chunked`, an ignored min-p by `sampled.min-p`. The catch
matrix of a fault campaign (`mrbench faults`'s own judgement, campaign.fault_run): the clean
run and one run per fault, made side by side."""
import json

import pytest
import yaml
from support.side_by_side import run_variants

from mrbench.harness.campaigns.campaign import flagged
from mrbench.harness.campaigns.faults import fault_run
from mrbench.harness.record.results import read_summary
from mrbench.harness.record.suite import SUITES_DIR

pytestmark = pytest.mark.slow

OWN_SET = {"penalty-slot-reuse": "penalties", "partial-prefill-noise": "chunked",
           "min-p-ignored": "min-p"}


# The fault sets and two that share their engine shape: "only its own entry" is shown
# against sets it could have leaked into (greedy, top-k), at half the sweep's CPU time. That
# each sampling fault changes no other set's tokens, over all ten, is
# tests/unit/test_sampling_surface.py's.
SWEPT = ["greedy", "top-k", "min-p", "penalties", "chunked"]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    """The catch matrix of `mrbench faults` (campaign.fault_run: a fault's flagged checks
    less those that flagged the clean run) over the clean run and one run per fault, made
    side by side (support.side_by_side: the entry gates no latency, and a fault run's
    checks are judged against the same clean run whichever ran first)."""
    root = tmp_path_factory.mktemp("sampling-sets")
    suite = yaml.safe_load((SUITES_DIR / "surface.yaml").read_text())
    entry = next(w for w in suite["workloads"] if w["id"] == "sampled")
    entry["params"]["sets"] = SWEPT
    suite["workloads"] = [entry]
    (root / "sampled.yaml").write_text(yaml.safe_dump(suite))
    runs = run_variants(root, root / "sampled.yaml",
                        {"clean": [], **{f: ["--fault", f] for f in sorted(OWN_SET)}},
                        in_process=True)
    clean = read_summary(runs["clean"].path)
    false_alarms = set(flagged(clean))
    res = {"clean": {"verdict": clean.verdict, "false_alarms": len(false_alarms),
                     "exit": runs["clean"].code},
           "faults": {f: fault_run(read_summary(runs[f].path), runs[f].code, f,
                                   false_alarms).model_dump(mode="json")
                      for f in OWN_SET}}
    return res, root


def checks(out, run_dir: str) -> dict[str, dict]:
    summary = json.loads((out / run_dir / "summary.json").read_text())
    return {f"{c['workload']}/{c['metric']}": c for c in summary["checks"]}


def test_clean_v2_samples_what_v1_samples_in_every_set(matrix):
    res, out = matrix
    assert res["clean"]["verdict"] == "pass" and res["clean"]["false_alarms"] == 0, res["clean"]
    assert res["clean"]["exit"] == 0
    got = checks(out, "clean")
    for name in SWEPT:
        agree = got[f"sampled.{name}/token_agreement"]
        assert agree["verdict"] == "pass" and agree["candidate"] == 1.0, agree
    assert got["sampled.chunked/chunked_prefill_coverage"]["verdict"] == "pass"
    assert got["sampled.penalties/syncs_per_step"]["candidate"] == 0   # no sync on V2


@pytest.mark.parametrize("fault", sorted(OWN_SET))
def test_each_fault_is_caught_by_its_own_set_only(matrix, fault):
    res, out = matrix
    r = res["faults"][fault]
    assert r["caught"] and not r["failures"], r
    assert {b.split("/")[0] for b in r["by"]} == {f"sampled.{OWN_SET[fault]}"}, r["by"]
    assert f"sampled.{OWN_SET[fault]}/token_agreement" in r["by"]
    assert r["exit"] == 1 and r["verdict"] == "regression"        # caught: a regression
