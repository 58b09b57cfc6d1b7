"""`mrbench-lm-eval`'s entry point: lm-eval is an extra, so the command says in one line how
to get it instead of failing on an import traceback (harness/run/targets/bundled/lm_eval.py
imports lm-eval at its top, as lm-eval's model registry needs)."""
from __future__ import annotations

import importlib.util
import sys


def main() -> None:
    if importlib.util.find_spec("lm_eval") is None:
        print("mrbench-lm-eval: lm-eval is not installed: pip install 'mrbench[lm-eval]'",
              file=sys.stderr)
        sys.exit(2)
    from ..run.targets.bundled.lm_eval import main as lm_eval_main  # lazy: lm-eval
    lm_eval_main()


if __name__ == "__main__":
    main()
