"""scripts/gpu/nightly-tail.yaml times the end of `nightly` on the GPU in a GPU command of
its own: it must stay the nightly's own entries (the timing is of nightly, not of a
look-alike), spec cut to the k = 4 points the earlier run did not reach."""
from pathlib import Path

from mrbench.harness.record.suite import load_suite

ROOT = Path(__file__).resolve().parents[2]


def test_nightly_tail_is_nightlys_entries_from_spec_k4_on() -> None:
    night = {e.id: e for e in load_suite("nightly").workloads}
    tail = load_suite(str(ROOT / "scripts" / "gpu" / "nightly-tail.yaml"))
    assert [e.id for e in tail.workloads] == ["spec", "warmup", "mooncake"]
    assert tail.thresholds == load_suite("nightly").thresholds
    for e in tail.workloads:
        want = dict(night[e.id].params, **({"ks": [4]} if e.id == "spec" else {}))
        assert (e.workload, e.params, e.thresholds) == \
            (night[e.id].workload, want, night[e.id].thresholds)
