"""Where mrbench finds its data: the one resolver of the data directory.

Datasets and traces are never committed; they are read at run time from
`$MRBENCH_DATA_DIR` (CI and the nightly job set it). Without it, a source checkout looks in
`../shared/data` beside the checkout, as the team's machines are laid out.
"""
from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "MRBENCH_DATA_DIR"
CHECKOUT = Path(__file__).resolve().parents[2]


def data_dir() -> Path:
    """$MRBENCH_DATA_DIR, else ../shared/data next to the checkout."""
    return Path(os.environ.get(DATA_DIR_ENV) or CHECKOUT.parent / "shared" / "data")
