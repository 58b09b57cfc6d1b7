"""What happened, and what to try, for each recorded failure of a run.

A failure's record is the one line its side raised (summary.json `failures[].error`): the
engine process's end as `harness.run.engines.worker` words it (a signal, an exit code, the
watchdog's deadline), the bundled engine's own refusals (a KV cache larger than the free
memory, a scheduler that made no progress), an interrupt, or any other error. The report
and the terminal summary put beside it the likely cause in words and the next thing to try,
read from that line, so that a run written before the hints were added gets them too.
Each cause is named only where the line says it: "killed by signal SIGKILL" comes from
outside the engine (the watchdog's own kill is worded as a timeout), and "KV blocks
exhausted" only where the engine found its block pool really short.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# signals an engine takes for a crash in its own native code
CRASH_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT")


@dataclass(frozen=True)
class Hint:
    """A failure's likely cause (`happened`) and the next step (`to_try`), in words."""

    happened: str
    to_try: str


def _memory_at_start(m: re.Match) -> Hint:
    return Hint(f"the engine refused to start: its KV cache needs {m['need']}, more than the "
                f"{m['free']} of {m['device']} memory free",
                "lower the workload's num_kv_blocks or max_num_seqs (its suite params), or "
                "free memory on the machine (other engines, other jobs) and run again")


EXHAUSTED = Hint("the engine stopped scheduling: its KV block pool is exhausted (the first "
                 "waiting request needs more blocks than are free)",
                 "raise num_kv_blocks, or lower max_num_seqs or max_tokens so that the "
                 "requests fit the pool")


STUCK = Hint("the engine stopped scheduling with KV blocks to spare: its scheduler "
             "admitted nothing it could have (not a memory shortage)",
             "a scheduler or runner bug: run the workload alone (mrbench run SUITE:ID) "
             "with --in-process to step through it, or record its schedule (mrbench steps "
             "record) and replay it")


NO_PROGRESS = Hint("the engine stopped scheduling for 100 steps in a row",
                   "read the engine log; if its KV cache is short on purpose, raise "
                   "num_kv_blocks")


SIGKILLED = Hint("the engine's process was killed with SIGKILL from outside it: the kernel's "
                 "OOM killer, a job's memory limit or a person (an engine never sends it to "
                 "itself, and the watchdog's kill is recorded as a timeout)",
                 "look for an OOM kill at that time (dmesg, journalctl -k, the job's memory "
                 "limit); if memory ran out, lower max_num_seqs or the KV cache, or start "
                 "fewer engines at once (--engine-starts 1)")


def _signal(m: re.Match) -> Hint:
    sig = m["signal"]
    if sig in CRASH_SIGNALS:
        return Hint(f"the engine crashed in native code ({sig}): a kernel, an extension or "
                    "the interpreter itself",
                    "the engine log's last lines say which call it was in; run the workload "
                    "alone (mrbench run SUITE:ID) with PYTHONFAULTHANDLER=1 for the Python "
                    "stack, or with --in-process under gdb for the native one")
    return Hint(f"the engine's process was ended by {sig} from outside it",
                "find what sent it (a job scheduler, a supervisor, a person) and run again")


def _exit_code(m: re.Match) -> Hint:
    return Hint(f"the engine's process exited by itself with code {m['code']} in the middle "
                "of a call (os._exit or sys.exit in the engine or a library it loaded)",
                "read the engine log: the process's last words are there")


def _timeout(m: re.Match) -> Hint:
    return Hint(f"the engine stopped answering '{m['call']}': the watchdog killed its process "
                f"after {m['seconds']} s (a deadlock, a collective that never returns, or a "
                "call slower than the deadline)",
                "if the call is only slow (a large workload, a loaded machine), raise "
                "--timeout; else run the workload alone (mrbench run SUITE:ID) with "
                "--in-process and see where it waits (py-spy dump --pid PID)")


INTERRUPTED = Hint("the run was stopped (SIGINT or SIGTERM) while this workload ran: its "
                   "results are lost",
                   "run it again (mrbench run SUITE:ID); under a job's time limit, give the job "
                   "more time or run fewer workloads")


DISK_FULL = Hint("a disk filled up (ENOSPC) while the side wrote to it",
                 "free space on that disk (results, caches, the temporary directory), or "
                 "write elsewhere (--out, TMPDIR)")


GPU_MEMORY = Hint("the GPU ran out of memory",
                  "lower --gpu-memory-utilization or the workload's max_num_seqs and KV cache, "
                  "and check what else holds the GPU (nvidia-smi)")


# (pattern, hint or the function that words it from the match), the first that matches a
# failure's line wins: the engine's own words before the process's end, which an error
# raised inside the engine may quote
_RULES = (
    (r"KV cache of \d+ blocks x \d+ tokens needs (?P<need>[\d.]+ \w+) but (?P<free>[\d.]+ \w+)"
     r" of (?P<device>\w+) memory is available", _memory_at_start),
    (r"no progress in \d+ steps: KV blocks exhausted", EXHAUSTED),
    (r"no progress in \d+ steps: no request scheduled", STUCK),
    (r"no progress in \d+ steps", NO_PROGRESS),
    (r"did not answer '(?P<call>\w+)' within (?P<seconds>[\d.]+) s", _timeout),
    (r"killed by signal SIGKILL\b", SIGKILLED),
    (r"killed by signal (?P<signal>SIG\w+)", _signal),
    (r"EngineCrashed: [^;]*?\(exit code (?P<code>\d+)\)", _exit_code),
    (r"interrupted while it ran \(SIGINT or SIGTERM\)", INTERRUPTED),
    (r"No space left on device|\bENOSPC\b", DISK_FULL),
    (r"CUDA out of memory|OutOfMemoryError", GPU_MEMORY),
)
_COMPILED = tuple((re.compile(p), fn) for p, fn in _RULES)

OTHER = Hint("the side raised the error above",
             "its traceback is in summary.json (failures), and the engine log beside it; run "
             "the workload alone (mrbench run SUITE:ID) to reproduce it")


def hint_for(error: str) -> Hint:
    """The hint for a failure's one-line error: the first rule whose pattern it matches,
    else OTHER (every failure gets one)."""
    for pattern, hint in _COMPILED:
        m = pattern.search(error)
        if m:
            return hint if isinstance(hint, Hint) else hint(m)
    return OTHER
