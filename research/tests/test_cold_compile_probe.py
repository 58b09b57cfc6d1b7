"""research/cold_compile_probe.py needs Triton, which is no mrbench dependency: without it the
probe says so in one line and exits 2; its arguments are checked before any child runs."""
import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location(
    "cold_compile_probe",
    Path(__file__).resolve().parents[1] / "cold_compile_probe.py")
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)


def test_without_triton_it_is_one_line_and_exit_2(capsys, monkeypatch):
    monkeypatch.setattr(probe, "find_spec", lambda name: None)
    assert probe.main(["--rounds", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs Triton" in err[0]


@pytest.mark.parametrize("args", [["--rounds", "1"], ["--seconds", "0"]])
def test_bad_arguments_are_one_line_and_exit_2(capsys, monkeypatch, args):
    monkeypatch.setattr(probe, "find_spec", lambda name: object())
    assert probe.main(args) == 2
    assert "--rounds must be >= 2" in capsys.readouterr().err
