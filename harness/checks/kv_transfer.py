"""PD through NIXL: did every request's KV arrive at the decode engine?

The measuring NixlConnector (harness/run/targets/vllm/kv_nixl.py) records, per request,
whether NIXL was asked to read its blocks and whether any read failed; a request the
connector reported received without a read, or with a failed block, decoded on KV that
never arrived. vLLM may go on and produce tokens all the same (garbage, or a recompute), so
this is judged on the transfer itself: every side that moved its KV through NIXL must have
0 such requests, and the note names them. Sides that moved no KV through NIXL (the bundled
runner, vLLM's example connector) carry no record and are not judged here."""
from __future__ import annotations

from mrbench.contract import SideResult

from ..record.run_record import Bar, BarKind, Check, DeltaKind, Verdict

SHOWN = 8                       # request ids named in the note, per side


def _missing(side: SideResult) -> tuple[int, list[int]] | None:
    """(requests through NIXL, the req_index of those whose KV never arrived), or None
    where the side moved no KV through NIXL."""
    rows = [r for r in side.requests if r.get("kv_arrived") is not None]
    if not rows:
        return None
    return len(rows), sorted(int(r["req_index"]) for r in rows if not _true(r["kv_arrived"]))


def _true(v: object) -> bool:
    return v is True or str(v).lower() in ("true", "1")


def kv_transfer_check(wl: str, base: SideResult, cand: SideResult) -> Check | None:
    got = {name: _missing(s) for name, s in (("baseline", base), ("candidate", cand))}
    if all(v is None for v in got.values()):
        return None
    bad = {n: v[1] for n, v in got.items() if v is not None and v[1]}
    said = "; ".join(
        f"{n}: {len(v[1])} of {v[0]} requests" + (
            f" (req {', '.join(map(str, v[1][:SHOWN]))}{' ...' if len(v[1]) > SHOWN else ''})"
            if v[1] else "")
        for n, v in got.items() if v is not None)
    note = (f"KV never arrived, or arrived partial: {said}" if bad
            else f"every request's KV read by the decode engine ({said} missing)")
    count = {n: (float(len(v[1])) if v is not None else None) for n, v in got.items()}
    return Check(wl, "kv_transfers_missing", "requests", count["baseline"], count["candidate"],
                 None, None, None, "0 on every side that moved KV through NIXL",
                 "per request: NIXL READ posted and no block failed (the measuring connector)",
                 Verdict.REGRESSION if bad else Verdict.PASS, note,
                 delta_kind=DeltaKind.NONE, bar=Bar(kind=BarKind.MAX_VALUE, value=0))
