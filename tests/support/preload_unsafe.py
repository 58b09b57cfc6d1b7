"""A preload module that reports its process unsafe to fork from, as the real one does when
an import initialised the CUDA driver (tests/unit/test_preload.py)."""
import os

from mrbench.harness.run.engines.preload import LOG_ENV, READY, STARTED, UNSAFE

with open(os.environ[LOG_ENV], "a") as log:
    log.write(f"{STARTED}\n{UNSAFE}: stand-in for an import that initialised the CUDA driver\n"
              f"{READY} in 0.00 s\n")
