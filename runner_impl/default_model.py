"""Where the bundled default model lives (built and shipped by issue 3)."""
from __future__ import annotations

from pathlib import Path

from .errors import RunnerError

DEFAULT_MODEL_DIR = Path(__file__).parent / "assets" / "gsm8k-tiny"
# Its EAGLE-1 draft head (training/train_eagle_head.py): what vLLM's V2 speculates with.
DEFAULT_EAGLE_DIR = Path(__file__).parent / "assets" / "gsm8k-tiny-eagle"


def default_model_dir() -> Path:
    if not (DEFAULT_MODEL_DIR / "config.json").exists():
        raise RunnerError(f"the bundled default model is missing ({DEFAULT_MODEL_DIR}); "
                          "pass model=<Hugging Face directory>")
    return DEFAULT_MODEL_DIR


def default_eagle_dir() -> Path:
    """The bundled model's EAGLE-1 head, in vLLM's `EagleLlamaForCausalLM` format."""
    if not (DEFAULT_EAGLE_DIR / "config.json").exists():
        raise RunnerError(f"the bundled EAGLE head is missing ({DEFAULT_EAGLE_DIR}); "
                          "train it with training/train_eagle_head.py")
    return DEFAULT_EAGLE_DIR
