"""Targets register themselves on import."""
from . import bundled  # noqa: F401
