"""ci/nightly.sh and the history: tonight's run is added, `history report` gates the
groups of the runs it added, and a change point that the night starts fails it (exit 1)
with the first bad commit in the job summary; the next night, the known change passes.
mrbench's run commands are a stub here (the runs are synthetic); `history` is the real
one."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.history_runs import commit, write_run

from mrbench.harness.record import history

pytestmark = pytest.mark.slow       # four CLI processes (~20 s); the logic is also tested
                                    # in-process by test_history_attribution
ROOT = Path(__file__).resolve().parents[2]
STUB = """#!/usr/bin/env bash
# faults SUITE ... --out DIR: the clean row is $STUB_RUN; report: a table; history: real
case "$1" in
  faults) while [ $# -gt 0 ]; do [ "$1" = --out ] && out="$2"; shift; done
          mkdir -p "$out" && cp -r "$STUB_RUN" "$out/clean"; echo '{}' ;;
  report) echo "| verdict table |" ;;
  history) exec "$REAL_PYTHON" -m mrbench.harness.cli "$@" ;;
  *) exit 2 ;;
esac
"""


def _night(tmp_path, day, ops):
    src = write_run(tmp_path / "made", day, ops=ops)
    env = dict(os.environ, MRBENCH=str(tmp_path / "mrbench"), STUB_RUN=str(src),
               REAL_PYTHON=sys.executable, MRBENCH_OUT=str(tmp_path / f"night-{day}"),
               MRBENCH_HISTORY=str(tmp_path / "h.sqlite"),
               GITHUB_STEP_SUMMARY=str(tmp_path / f"summary-{day}.md"))
    return subprocess.run(["bash", str(ROOT / "ci" / "nightly.sh"), "cpu"], env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_night_that_starts_a_change_fails_and_names_its_commit(tmp_path):
    stub = tmp_path / "mrbench"
    stub.write_text(STUB)
    stub.chmod(0o755)
    history.add(tmp_path / "h.sqlite",
                [write_run(tmp_path / "earlier", day, ops=100.0) for day in range(1, 7)])
    r = _night(tmp_path, 7, ops=104.0)
    assert r.returncode == 1, r.stdout + r.stderr
    summary = (tmp_path / "summary-7.md").read_text()
    assert "history: CHANGE with the newest run: w/ops_per_step" in summary
    assert commit(7)[:10] in summary and f"last good: vLLM {commit(6)[:10]}" in summary
    assert (tmp_path / "night-7" / "history.html").is_file()
    r = _night(tmp_path, 8, ops=104.0)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "history: no newest run starts a change point" in \
        (tmp_path / "summary-8.md").read_text()
    assert len(history.runs(tmp_path / "h.sqlite")) == 8
