"""CUDA-graph mode: whether both vLLM sides run the graphs the same engine arguments give.

vLLM resolves the CUDA-graph mode an engine captures from its arguments and from what its
attention backend supports (`CompilationConfig.resolve_cudagraph_mode_and_sizes`). V1 and
V2 call the same resolution, and two builds of one runner should agree, so with the same
arguments the two sides must read back the same mode. A side that does not (V2 before vLLM
PR 32936 kept FULL_AND_PIECEWISE under FlashInfer with spec decode, where V1 fell back to
PIECEWISE) captures graphs the backend does not support, or drops graphs it does, and no
latency or token check need show it on one run.
"""
from __future__ import annotations

from mrbench.contract import SideResult

from ..record.run_record import Bar, BarKind, Check, DeltaKind, Verdict


def graph_mode_check(wl: str, base: SideResult, cand: SideResult) -> Check | None:
    """Both vLLM sides' read-back CUDA-graph modes, compared: a regression when they differ
    under the same engine arguments. None where either side is not vLLM or recorded no
    mode (the bundled runner chooses its graphs per runner by design); reported, not gated,
    where the sides were given different engine arguments (their modes may rightly differ)."""
    if base.resolved.get("target") != "vllm" or cand.resolved.get("target") != "vllm":
        return None
    b, c = base.resolved.get("cudagraph_mode"), cand.resolved.get("cudagraph_mode")
    if not b or not c:
        return None
    differ = b != c
    args = [(s.resolved.get("engine") or {}).get("engine_args") or {} for s in (base, cand)]
    note = f"baseline {b}, candidate {c}"
    verdict = Verdict.REGRESSION if differ else Verdict.PASS
    if differ and args[0] != args[1]:
        verdict, note = Verdict.INFO, (f"{note}; not gated: the sides were given different "
                                       "engine arguments")
    elif differ:
        note += ("; the same engine arguments resolve one mode (the arguments and the "
                 "attention backend's CUDA-graph support)")
    return Check(wl, "cudagraph_mode", "sides differing", None, float(differ), None, None,
                 None, "the baseline's mode", "CUDA-graph mode each engine read back",
                 verdict, note, delta_kind=DeltaKind.NONE,
                 bar=Bar(kind=BarKind.MAX_VALUE, value=0.0))
