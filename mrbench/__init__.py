"""mrbench: a benchmark and regression harness for LLM inference model runners.

One import root. The code lives in three layers, each a sub-package:

- `mrbench.runner_impl`: the bundled MRv2-style runner (imports nothing of the rest);
- `mrbench.contract`: what workloads program against (protocols, result types, errors, paths);
- `mrbench.workloads`: the workloads (they import only `mrbench.contract`);
- `mrbench.harness`: targets, statistics, results, reports, the CLI.

`import-linter` checks these layers in CI (`.importlinter`). In the source tree the three
sub-packages stay top-level folders (`harness/`, `workloads/`, `runner_impl/`); setuptools'
`package-dir` maps them under `mrbench` when installed, so nothing generic lands in
site-packages.
"""
from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

# An uninstalled source checkout (the checkout on PYTHONPATH, as on the GPU machine): the
# sub-packages are folders beside this one, so look there too. An installed copy (wheel or
# editable) never takes this branch's effect: its sub-packages resolve first.
_checkout = Path(__file__).resolve().parent.parent
if (_checkout / "pyproject.toml").is_file() and (_checkout / "harness" / "__init__.py").is_file():
    __path__.append(str(_checkout))  # type: ignore[name-defined]
