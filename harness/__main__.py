"""`python -m harness ...` is `mrbench ...` (for a checkout on PYTHONPATH, no console script)."""
import sys

from .cli import main

sys.exit(main())
