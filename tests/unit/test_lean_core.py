"""The core install is lean: a run imports neither lm-eval nor transformers (both extras),
asking for the lm-eval scorer without lm-eval is one line and exit 2 before anything runs,
and `mrbench-lm-eval` without lm-eval says how to get it instead of an import traceback."""
import subprocess
import sys

import pytest

from mrbench.harness.cli import main
from mrbench.harness.commands import lm_eval as lm_eval_launch
from mrbench.workloads import gsm8k

EXTRAS = ("lm_eval", "transformers", "datasets")


@pytest.mark.slow
def test_a_run_imports_no_extra(tmp_path):
    code = (f"import sys; from mrbench.harness.cli import main; "
            f"rc = main(['run', 'smoke', '--in-process', '--limit', '4', '--out', "
            f"{str(tmp_path / 'run')!r}]); "
            f"print(rc, sorted(m for m in {EXTRAS!r} if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "0 []", r.stdout[-2000:]


def _no_lm_eval(monkeypatch, module):
    real = module.importlib.util.find_spec
    monkeypatch.setattr(module.importlib.util, "find_spec",
                        lambda name, *a: None if name == "lm_eval" else real(name, *a))


def test_the_lm_eval_scorer_without_lm_eval_is_refused_in_one_line(tmp_path, monkeypatch,
                                                                    capsys):
    _no_lm_eval(monkeypatch, gsm8k)
    code = main(["run", "gsm8k", "--scorer", "lm-eval", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "pip install 'mrbench[lm-eval]'" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_mrbench_lm_eval_without_lm_eval_says_how_to_get_it(monkeypatch, capsys):
    _no_lm_eval(monkeypatch, lm_eval_launch)
    with pytest.raises(SystemExit) as e:
        lm_eval_launch.main()
    assert e.value.code == 2 and "mrbench[lm-eval]" in capsys.readouterr().err
