"""Where the bundled default model lives (built and shipped by issue 3)."""
from __future__ import annotations

from pathlib import Path

from .errors import RunnerError

DEFAULT_MODEL_DIR = Path(__file__).parent / "assets" / "gsm8k-tiny"


def default_model_dir() -> Path:
    if not (DEFAULT_MODEL_DIR / "config.json").exists():
        raise RunnerError(f"the bundled default model is missing ({DEFAULT_MODEL_DIR}); "
                          "pass model=<Hugging Face directory>")
    return DEFAULT_MODEL_DIR
