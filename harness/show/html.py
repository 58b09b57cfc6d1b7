"""What every HTML report shares: the template environment and figures as data URIs.

The run report, the campaign (faults / calibrate / power) report and the history report
are each one self-contained file: inline CSS, every plot a base64 PNG.
"""
from __future__ import annotations

import base64
import io
import os
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: never needs a display
import matplotlib.pyplot as plt  # noqa: E402
from jinja2 import Environment, FileSystemLoader  # noqa: E402

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
DPI = 80


def environment() -> Environment:
    """The jinja2 environment over the shipped templates (autoescaped)."""
    return Environment(loader=FileSystemLoader(str(TEMPLATE_DIR)), autoescape=True,
                       trim_blocks=True, lstrip_blocks=True)


def fig_to_data_uri(fig) -> str:
    """A matplotlib figure as a data: URI (PNG), closing the figure."""
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=DPI)   # figures lay out with tight_layout
    finally:
        plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def write_atomic(out: Path, text: str) -> Path:
    """Write ``text`` to ``out`` through a temporary file in the same directory (a reader
    never sees half a report)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return out
