"""The package installs under one root, and its layers hold (import-linter contracts)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())


def test_one_import_root_and_clean_layers():
    """A real install holds only `mrbench`, and every contract in .importlinter is kept."""
    if shutil.which("lint-imports", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    r = subprocess.run(["bash", str(ROOT / "scripts" / "check_layers.sh")], cwd=ROOT,
                       env={**os.environ, "PYTHON": sys.executable},
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "Contracts: 10 kept, 0 broken." in r.stdout
