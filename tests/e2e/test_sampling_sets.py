"""The sampling sweep end to end on the bundled model (CPU), as the `surface` suite runs it
(`surface:sampled`: one entry per parameter set). The clean V2 samples what V1 samples in
every set; each sampling fault is caught, and only by its own set's entry: the penalties'
stale per-slot counts by `sampled.penalties`, a seeded stream shifted by a dropped
partial-prefill draw by `sampled.chunked`, an ignored min-p by `sampled.min-p`. One fault
campaign (`mrbench faults`): the clean run, then one run per fault."""
import json

import pytest

from mrbench.harness.cli import main
from mrbench.workloads.sampled import SETS

pytestmark = pytest.mark.slow

OWN_SET = {"penalty-slot-reuse": "penalties", "partial-prefill-noise": "chunked",
           "min-p-ignored": "min-p"}


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    out = tmp_path_factory.mktemp("sampling-sets") / "m"
    code = main(["faults", "surface:sampled",
                 *(a for f in sorted(OWN_SET) for a in ("--fault", f)), "--out", str(out)])
    return code, out, json.loads((out / "faults.json").read_text())


def checks(out, run_dir: str) -> dict[str, dict]:
    summary = json.loads((out / run_dir / "summary.json").read_text())
    return {f"{c['workload']}/{c['metric']}": c for c in summary["checks"]}


def test_clean_v2_samples_what_v1_samples_in_every_set(matrix):
    code, out, res = matrix
    assert res["clean"]["verdict"] == "pass" and res["clean"]["false_alarms"] == 0, res["clean"]
    got = checks(out, "clean")
    for name in SETS:
        agree = got[f"sampled.{name}/token_agreement"]
        assert agree["verdict"] == "pass" and agree["candidate"] == 1.0, agree
    assert "8 unseeded requests not compared" in got["sampled.mixed-seeds/token_agreement"]["note"]
    assert got["sampled.chunked/chunked_prefill_coverage"]["verdict"] == "pass"
    assert got["sampled.penalties/syncs_per_step"]["candidate"] == 0   # no sync on V2


@pytest.mark.parametrize("fault", sorted(OWN_SET))
def test_each_fault_is_caught_by_its_own_set_only(matrix, fault):
    code, out, res = matrix
    r = res["faults"][fault]
    assert r["caught"], r
    assert {b.split("/")[0] for b in r["by"]} == {f"sampled.{OWN_SET[fault]}"}, r["by"]
    assert f"sampled.{OWN_SET[fault]}/token_agreement" in r["by"]
    assert code == 0
