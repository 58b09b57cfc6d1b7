"""mrbench installed from a built wheel into a fresh virtualenv, run from a temporary
directory with no checkout, no ../shared and no $MRBENCH_DATA_DIR: `mrbench run` finds the
suites, the bundled model and the data slices inside the package, and the manifest says
the data came from the package.

The fresh venv gets the wheel alone (`--no-deps`); its dependencies are the test venv's
own, reached through a path line in a .pth file (a path line adds the folder to sys.path
without running that folder's .pth hooks, so the checkout's editable install stays out and
`import mrbench` is the wheel's). So the test needs no network and costs one wheel build.
"""
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig

import pytest

from mrbench.contract.paths import CHECKOUT

pytestmark = pytest.mark.slow       # builds a wheel and runs the harness: CI runs it


def _sh(*cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r


def test_a_wheel_runs_anywhere_with_its_packaged_data(tmp_path):
    # built from a copy of what the wheel packs: a build in the checkout would leave build/
    # there, whose stale files a later build packs again
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(CHECKOUT / name, src / name)
    for pkg in ("mrbench", "harness", "workloads", "runner_impl"):
        shutil.copytree(CHECKOUT / pkg, src / pkg,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    wheels = tmp_path / "wheels"
    _sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
        "-w", str(wheels), str(src))
    [wheel] = wheels.glob("mrbench-*.whl")
    venv = tmp_path / "venv"
    _sh(sys.executable, "-m", "venv", "--without-pip", str(venv))
    py = venv / "bin" / "python"
    _sh(sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
        str(wheel))
    purelib = _sh(str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"
                  ).stdout.strip()
    deps = [p for p in {sysconfig.get_paths()["purelib"], *site.getsitepackages()}
            if os.path.isdir(p)]
    with open(os.path.join(purelib, "_test_deps.pth"), "w") as f:
        f.write("\n".join(deps) + "\n")

    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MRBENCH_", "PYTHONPATH", "VIRTUAL_ENV"))}
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    where = _sh(str(py), "-c", "import mrbench, mrbench.harness; "
                "print(mrbench.__file__); print(mrbench.harness.__file__)",
                cwd=work, env=env).stdout
    assert str(CHECKOUT) not in where and purelib in where, where

    mrbench = str(venv / "bin" / "mrbench")
    listing = json.loads(_sh(mrbench, "data", "--json", cwd=work, env=env).stdout)
    assert listing["origin"] == "packaged"
    # the PD suite: GSM8K through a prefill and a decode engine, and the Mooncake replay
    # from the packaged slice
    r = subprocess.run([mrbench, "run", "pd", "--limit", "8", "--out", "run"], cwd=work,
                       env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    manifest = json.loads((work / "run" / "manifest.json").read_text())
    assert manifest["data"]["origin"] == "packaged"
    summary = json.loads((work / "run" / "summary.json").read_text())
    assert summary["verdict"] == "pass" and not summary["failures"]
    assert {c["workload"] for c in summary["checks"]} == {"gsm8k-pd", "trace-pd"}
