"""A PD pair through NixlConnector, on the session's side: how requests carry vLLM's
`kv_transfer_params`, where each engine's NIXL side channel listens, and what the decode
engine's worker recorded of each request's transfer (kv_nixl.py records it there).

The requests go as vLLM's disaggregation proxy sends them (its `toy_proxy_server`): to the
prefill engine with `do_remote_decode`, which keeps the prompt's blocks when the request
finishes and returns where they are; then to the decode engine with the prefill output's
`kv_transfer_params`, which pulls the blocks before it schedules the request.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ...builds import environ_set

# How long a request may wait for its KV at the decode engine while nothing else runs:
# a transfer on one machine takes milliseconds, a NIXL handshake well under a second
KV_WAIT_S = float(os.environ.get("MRBENCH_KV_WAIT_S", "60"))
WAITING = "WAITING_FOR_REMOTE_KVS"        # vLLM's request status while its KV is on the way


# Where an engine's side channel listens: a port derived from the engine's name, so that
# each start of the same engine takes the same port (see side_channel_port)
PORT_BASE, PORT_SPAN, PORT_TRIES = 20000, 20000, 64


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def side_channel_port(key: str) -> Iterator[int]:
    """A port for one engine's NIXL side channel, the same at every start of that engine.

    Why not any free port: vLLM hashes VLLM_NIXL_SIDE_CHANNEL_PORT into its compile cache
    key (`envs.compile_factors` leaves out the side channel's host but not its port, in
    0.26 and 0.32), so an engine given a new port at each start compiled its model again
    every time (new files in vLLM's compile cache at each start), and the cold-engine rule
    rebuilt it twice before measuring it as it was. The port is derived from `key` (the
    side and the engine instance); where that one is taken, the next free one. Within: the
    port is claimed through a lock file, so two engines starting at once with the same key
    (an A/A run of one build) take two ports; vLLM's listener binds it before the engine is
    ready, and from then on the port itself is taken."""
    start = PORT_BASE + zlib.crc32(key.encode()) % PORT_SPAN
    locks = os.path.join(tempfile.gettempdir(), "mrbench-nixl-ports")
    os.makedirs(locks, exist_ok=True)
    for port in range(start, start + PORT_TRIES):
        path = os.path.join(locks, f"{port}.lock")
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:                  # another engine is starting on this port
            os.close(fd)
            continue
        try:
            if _bindable(port):
                yield port
                return
        finally:
            os.close(fd)                 # closing the file releases its lock
    raise RuntimeError(f"no free port for a NIXL side channel in {start}-{start + PORT_TRIES - 1}")


@contextlib.contextmanager
def engine_environment(nixl: bool, omp_bind: str | None, key: str) -> Iterator[None]:
    """The environment one engine of a PD pair starts under, where its worker reads it:
    with NIXL, its side channel's port (its handshake listener; two engines of one machine
    must not share one; the same port at every start of the engine named `key`:
    side_channel_port); on CPU, the CPUs its worker's OpenMP threads take (`omp_bind`,
    VLLM_CPU_OMP_THREADS_BIND: two workers each spreading over every CPU starve each
    other's OpenMP barriers: a wave of four short requests took two minutes on two
    cores)."""
    with contextlib.ExitStack() as stack:
        env: dict[str, str] = {}
        if nixl:
            port = stack.enter_context(side_channel_port(key))
            env.update(VLLM_NIXL_SIDE_CHANNEL_PORT=str(port),
                       VLLM_NIXL_SIDE_CHANNEL_HOST="127.0.0.1")
        if omp_bind:
            env["VLLM_CPU_OMP_THREADS_BIND"] = omp_bind
        if env:
            import vllm.envs as envs  # lazy: the vllm target only
            # vLLM caches its environment once an engine is up (`enable_envs_cache`): the
            # next engine of this process would read the first one's port, fail to bind it
            # in its listener thread and wait for that listener forever
            if hasattr(envs, "disable_envs_cache"):
                envs.disable_envs_cache()
            stack.enter_context(environ_set(env))
        yield


def with_transfer_params(params: Any, kv_transfer_params: dict[str, Any] | None) -> Any:
    """A copy of SamplingParams carrying `kv_transfer_params` (vLLM reads them from
    `extra_args`)."""
    out = params.clone()
    out.extra_args = dict(out.extra_args or {}, kv_transfer_params=kv_transfer_params)
    return out


PREFILL_PARAMS = {"do_remote_decode": True, "do_remote_prefill": False,
                  "remote_engine_id": None, "remote_block_ids": None,
                  "remote_host": None, "remote_port": None}


def waiting_for_kv(core: Any) -> list[str]:
    """The requests of an engine core still waiting for their KV to arrive."""
    reqs = getattr(core.scheduler, "requests", {}) or {}
    return [rid for rid, r in reqs.items() if getattr(r.status, "name", "") == WAITING]


@dataclass
class Transfer:
    """One request's KV transfer at the decode engine, as its worker recorded it."""

    seconds: float | None          # from the worker's first sight of it to `get_finished`
    bytes: int
    blocks: int
    arrived: bool                  # NIXL was asked to read its blocks, and none failed


class Transfers:
    """What the decode engine's workers recorded, by the session's request id (vLLM's ids
    carry a suffix after the last '-'). Under tensor parallelism each rank pulls its own
    heads: a request arrived where every rank read it, its time is the slowest rank's, its
    bytes the sum of what the ranks read."""

    def __init__(self) -> None:
        self.by_request: dict[str, Transfer] = {}

    def clear(self) -> None:
        self.by_request.clear()

    def take(self, per_rank: list[list[dict[str, Any]]]) -> None:
        merged: dict[str, list[dict[str, Any]]] = {}
        for rank in per_rank:
            for r in rank or []:
                if not r.get("waiting"):
                    merged.setdefault(r["request_id"].rsplit("-", 1)[0], []).append(r)
        for rid, recs in merged.items():
            ends = [r["t_end"] - r["t_start"] for r in recs if r.get("t_end") is not None]
            self.by_request[rid] = Transfer(
                seconds=max(ends) if ends else None,
                bytes=sum(int(r.get("bytes") or 0) for r in recs     # what was read
                          if r.get("read") and not r.get("failed")),
                blocks=max(int(r.get("blocks") or 0) for r in recs),
                arrived=all(r.get("read") and not r.get("failed") for r in recs))


    def count(self, rid: str, totals: Any) -> Transfer:
        """One finished request's transfer, added to the pair's totals (`pd_kv_transfers`,
        `pd_kv_bytes`, `pd_kv_missing`); a request the workers recorded nothing of never
        had its KV pulled."""
        kv = self.by_request.get(rid) or Transfer(None, 0, 0, False)
        totals["pd_kv_transfers"] += 1
        totals["pd_kv_bytes"] += kv.bytes
        totals["pd_kv_missing"] += not kv.arrived
        return kv


class KvWait:
    """Rounds in which the decode engine only waits for KV on the way: expected with NIXL
    (the pull is asynchronous), so they are not the session's "scheduled nothing" stop; a
    request that waited `KV_WAIT_S` with nothing else to run ends the pass as a recorded
    failure naming it and the side (a stalled transfer), never a hung run."""

    def __init__(self, side: str) -> None:
        self.side = side
        self.since: float | None = None

    def waiting(self, ran: bool, core: Any) -> bool:
        waiting = [] if ran else waiting_for_kv(core)
        if not waiting:
            self.since = None
            return False
        now = time.perf_counter()
        self.since = self.since or now
        if now - self.since > KV_WAIT_S:
            raise stalled_error(waiting, self.side, now - self.since)
        time.sleep(0.0005)          # give NIXL's threads the CPU rather than spin
        return True


def stalled_error(waiting: list[str], side: str, waited_s: float) -> RuntimeError:
    ids = ", ".join(sorted((r.rsplit("-", 1)[0] for r in waiting), key=_as_int))
    return RuntimeError(
        f"KV transfer stalled: the {side} PD pair's decode engine waited {waited_s:.0f} s "
        f"for the KV of request(s) {ids} (NixlConnector), with nothing else to run; "
        f"stopped rather than hang (MRBENCH_KV_WAIT_S={KV_WAIT_S:g})")


def _as_int(s: str) -> tuple[int, str]:
    return (int(s), s) if s.isdigit() else (1 << 60, s)

