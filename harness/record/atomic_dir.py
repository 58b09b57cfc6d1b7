"""A directory written whole or not at all: filled in a hidden sibling, then renamed into
place.

Why: a run's or a campaign's results are read as a unit (the manifest says what the tables
hold), so a crash, an interrupt or a full disk halfway must leave no directory that looks
finished. One rename on one filesystem is atomic; a hidden sibling (`.NAME.*`) is on the
same filesystem as its target.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def filled_in_place(out: Path) -> Iterator[Path]:
    """Yield a new hidden sibling of `out` to write into; when the block ends, rename it to
    `out` (which must be missing or an empty directory: check_out). Whatever is raised, in
    the block or by the rename, removes the sibling and leaves `out` as it was."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield tmp
        if out.exists():              # an empty directory (check_out allowed it)
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
