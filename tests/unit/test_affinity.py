"""--pin-cpus: the list it parses, the engine processes inheriting it, the record of it."""
import os
import subprocess
import sys

import pytest

from mrbench.contract import BadInput
from mrbench.harness.measure.affinity import _ranges, parse_cpu_list

linux_only = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"),
                                reason="CPU affinity is Linux-only")


def test_parse_cpu_list():
    assert parse_cpu_list("4") == [4]
    assert parse_cpu_list("4,5") == [4, 5]
    assert parse_cpu_list("2-3, 8,2") == [2, 3, 8]
    for bad in ("", "a", "3-1", "-1", "1-"):
        with pytest.raises(BadInput):
            parse_cpu_list(bad)


def test_ranges_round_trip():
    assert _ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert parse_cpu_list(_ranges([0, 1, 2, 5, 7, 8])) == [0, 1, 2, 5, 7, 8]


def _child_affinity(q):
    q.put(sorted(os.sched_getaffinity(0)))


@linux_only
def test_pinned_process_and_its_spawned_engines_share_the_cpu():
    """In a fresh interpreter (pinning is process-wide): pin, then spawn as the worker pool
    does; the child runs on the pinned CPU, so does a thread that was running before the
    pin, and the run's environment records it."""
    cpu = max(os.sched_getaffinity(0))
    code = f"""
import multiprocessing as mp, os, sys, threading
sys.path.insert(0, {os.getcwd()!r})
from mrbench.harness.measure.affinity import pin_cpus
from mrbench.harness.record.results import environment
from tests.unit.test_affinity import _child_affinity
if __name__ == "__main__":
    go = threading.Event(); seen = []
    t = threading.Thread(target=lambda: (go.wait(), seen.append(sorted(os.sched_getaffinity(0)))))
    t.start()                              # a thread already running when the pin comes
    assert pin_cpus("{cpu}") == [{cpu}]
    go.set(); t.join()
    ctx = mp.get_context("spawn"); q = ctx.Queue()
    p = ctx.Process(target=_child_affinity, args=(q,)); p.start(); child = q.get(); p.join()
    print(child, environment()["device"]["cpu_affinity"], seen[0])
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [f"[{cpu}]", f"[{cpu}]", f"[{cpu}]"]
