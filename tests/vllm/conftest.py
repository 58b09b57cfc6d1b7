"""Every test here starts real vLLM engines (tens of seconds each on CPU): all are `slow`,
which CI runs and `pytest -m "not slow"` leaves out for a quick loop."""
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in Path(item.fspath).parents:
            item.add_marker(pytest.mark.slow)
