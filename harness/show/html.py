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
from markupsafe import Markup, escape  # noqa: E402

from ..record.errors import ReportNotWritten  # noqa: E402

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
DPI = 80
SPARK_W, SPARK_H, SPARK_PAD = 96, 22, 3      # px: a sparkline sits in a table row


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


def write_report(out: Path, html: str) -> Path:
    """A report's write_atomic, after the results beside it were committed: a write the disk
    refuses (ENOSPC, a quota, a read-only mount) is ReportNotWritten, one line that names the
    file (no half report is left, and the results are untouched), not a traceback."""
    try:
        return write_atomic(out, html)
    except OSError as e:
        raise ReportNotWritten(out, e) from None


def sparkline(values: list[float], bar: float | None, title: str, last_color: str) -> Markup:
    """A tiny inline SVG of a series (oldest first), the last point (this run) drawn as a
    dot in `last_color`, the bar as a dashed red line: where a figure has been running
    against its bar, in the space of a table cell. SVG, not a PNG: a row carries a few
    hundred bytes, and the text of `title` (a hover) stays text."""
    lo = min([*values, *([] if bar is None else [bar]), 0.0])
    hi = max([*values, *([] if bar is None else [bar]), 0.0])
    span = (hi - lo) or 1.0
    step = (SPARK_W - 2 * SPARK_PAD) / max(len(values) - 1, 1)

    def y(v: float) -> float:
        return SPARK_PAD + (hi - v) / span * (SPARK_H - 2 * SPARK_PAD)
    pts = [(SPARK_PAD + i * step, y(v)) for i, v in enumerate(values)]
    line = " ".join(f"{x:.1f},{yy:.1f}" for x, yy in pts)
    parts = [f'<line x1="0" x2="{SPARK_W}" y1="{y(0.0):.1f}" y2="{y(0.0):.1f}" '
             f'stroke="#ccc" stroke-width="1"/>']
    if bar is not None:
        parts.append(f'<line x1="0" x2="{SPARK_W}" y1="{y(bar):.1f}" y2="{y(bar):.1f}" '
                     f'stroke="#c0392b" stroke-width="1" stroke-dasharray="3,2"/>')
    parts.append(f'<polyline points="{line}" fill="none" stroke="#555" stroke-width="1.2"/>')
    x, yy = pts[-1]
    parts.append(f'<circle cx="{x:.1f}" cy="{yy:.1f}" r="2.5" fill="{escape(last_color)}"/>')
    return Markup(f'<svg class="spark" width="{SPARK_W}" height="{SPARK_H}" role="img" '
                  f'viewBox="0 0 {SPARK_W} {SPARK_H}"><title>{escape(title)}</title>'
                  f'{"".join(parts)}</svg>')
