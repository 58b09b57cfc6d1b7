"""`SUITE:ID[,ID]`: a suite's entries by id, with the suite's own thresholds."""
import pytest

from mrbench.contract import BadInput
from mrbench.harness.record.suite import load_suite


def test_select_keeps_the_entries_and_the_bars() -> None:
    full = load_suite("gpu-quick")
    one = load_suite("gpu-quick:spec,gsm8k")
    assert [w.id for w in one.workloads] == ["gsm8k", "spec"]       # the suite's order
    assert one.thresholds == full.thresholds
    assert one.name == "gpu-quick.gsm8k+spec"


@pytest.mark.parametrize("what", ["gpu-quick:nope", "gpu-quick:", "nosuch:gsm8k"])
def test_an_unknown_entry_or_suite_is_bad_input(what: str) -> None:
    with pytest.raises(BadInput):
        load_suite(what)
