"""A preload module whose process ends as it imports (tests/unit/test_preload.py)."""
import os

from mrbench.harness.run.engines.preload import LOG_ENV, STARTED

with open(os.environ[LOG_ENV], "a") as log:
    log.write(f"{STARTED}\n")
os._exit(3)
