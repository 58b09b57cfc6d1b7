"""`python -m mrbench ...` is `mrbench ...` (for a checkout on PYTHONPATH, no console script)."""
import sys

from mrbench.harness.cli import main

sys.exit(main())
