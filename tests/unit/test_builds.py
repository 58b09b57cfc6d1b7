"""harness.builds: a side names its own Python environment. A path that is no build of
vLLM is one line and exit 2 before any engine starts; an engine process started in a
virtualenv's build runs that interpreter and still imports the harness."""
import subprocess
import sys
from pathlib import Path

import pytest

from mrbench.contract import EngineOptions
from mrbench.harness.cli import main
from mrbench.harness.run import builds
from mrbench.harness.run.engines.worker import EngineHost, PendingOpen
from mrbench.harness.run.targets.base import SideSpec, side_label


def _fake_vllm(site: Path, version: str = "9.9.9") -> None:
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    info = site / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A virtualenv of the harness's Python whose only package is a stand-in vllm."""
    root = tmp_path_factory.mktemp("venv") / "pr"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next((root / "lib").glob("python3*/site-packages"))
    _fake_vllm(site)
    return root


@pytest.mark.parametrize("value, words", [
    ("vllm@/no/such/dir:v2", "build /no/such/dir: no such file or directory"),
    ("vllm@:v2", "names no build after '@'"),
    ("bundled@{tmp}:v2", "a build names a vLLM environment"),
    ("vllm@{tmp}:v2", "neither a virtualenv, a Python interpreter, nor a site directory"),
])
def test_a_bad_build_is_one_line_and_exit_2(tmp_path, capsys, value, words):
    if "bundled" in value:
        _fake_vllm(tmp_path)
    code = main(["run", "smoke", "--candidate", value.format(tmp=tmp_path),
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and words in err, err
    assert not (tmp_path / "out").exists()


def test_a_virtualenv_without_vllm_is_refused(tmp_path):
    root = tmp_path / "empty"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    with pytest.raises(Exception, match="cannot import vllm"):
        builds.resolve(str(root))


def test_a_site_folder_and_a_virtualenv_resolve_to_their_vllm(tmp_path, venv):
    _fake_vllm(tmp_path / "site", "1.2.3")
    site = builds.resolve(str(tmp_path / "site"))
    assert (site.kind, site.vllm_version, site.python) == ("site", "1.2.3", sys.executable)
    assert site.sys_path[0] == str(tmp_path / "site")
    env = builds.resolve(str(venv))
    assert (env.kind, env.vllm_version) == ("venv", "9.9.9")
    assert env.python == str(venv / "bin" / "python")
    assert env.vllm_dir.startswith(str(venv))
    assert builds.resolve(str(venv / "bin" / "python")).kind == "venv"   # its interpreter too


def test_labels_name_the_builds_only_when_the_sides_differ():
    a = SideSpec("v2", target="vllm", build="/venvs/main")
    b = SideSpec("v2", target="vllm", build="/venvs/pr/bin/python")
    assert (side_label(b, a), side_label(a, b)) == ("v2@pr", "v2@main")
    assert side_label(a, a) == "v2"
    assert builds.label("/tmp/vllm-kit/site") == "vllm-kit/site"


def test_an_engine_process_runs_in_its_build(tmp_path, venv):
    """The engine process of a virtualenv's build runs that interpreter, and still runs
    the harness's code (a bundled session here: the spawn, not vLLM, is under test)."""
    host = EngineHost(timeout_s=120, build=builds.resolve(str(venv)))
    try:
        sess = PendingOpen(host, "bundled", SideSpec("v1"), EngineOptions(max_num_seqs=2),
                           tmp_path / "engine.log").result()
        assert sess.python == str(venv / "bin" / "python"), (tmp_path / "engine.log").read_text()
        assert sess.resolved()["runner"] == "v1"
        sess.close()
    finally:
        host.shutdown()
