"""Exit codes of the CLI.

0 pass; 1 a regression (or a missed fault); 2 bad input (`mrbench.contract.BadInput`: the
user's config, flags, dataset or paths are wrong, said in one line before anything is
written); 3 a run failed (a target crashed or hung; recorded in the results, and the other
workloads still ran).
"""
from __future__ import annotations

EXIT_PASS, EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_RUN_FAILED = 0, 1, 2, 3
