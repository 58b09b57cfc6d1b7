"""research/gap_cost_probe.py: it times forwards after each gap and prints one row a gap;
bad arguments are one line and exit 2."""
import importlib.util
import math
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location(
    "gap_cost_probe", Path(__file__).resolve().parents[1] / "gap_cost_probe.py")
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)


@pytest.mark.parametrize("kind", ["spin", "torch", "sleep"])
def test_a_row_a_gap_with_its_cost(capsys, kind):
    assert probe.main(["--gaps", "0,2", "--kind", kind, "--rounds", "3", "--forwards", "2",
                       "--width", "16", "--layers", "2"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()[2:]
    assert [r.split()[0] for r in rows] == ["0", "2"]
    assert rows[0].split()[-1] == "-" and math.isfinite(float(rows[1].split()[-1]))
    assert all(float(v) > 0 for r in rows for v in r.split()[1:3])


@pytest.mark.parametrize("args", [["--gaps", "1,2"], ["--gaps", "0,x"], ["--gaps", "0,-1"],
                                  ["--rounds", "0"]])
def test_bad_arguments_are_one_line_and_exit_2(capsys, args):
    assert probe.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gap_cost_probe:")
