"""Feature coverage: which runner features each workload of a run exercised, read from the
run's record (manifest.json's parameters and engines, summary.json's per-side figures and
checks).

Why: a verdict says nothing about a feature no workload reached, and the real MRv2 fixes
cluster where the suites never went: sampling parameters one at a time, seeded sampling
over prefill chunks, processed logprobs, FlashInfer, preemption, prefix-cache hits (issue
41; docs/coverage.md lists each feature and the bug class it is there for). So each feature
an entry asked for says whether it happened, on both sides, from what the engines
reported: one asked for that did not happen shows so, never as covered; a figure that a run
(an older one, or a target that does not count it) does not hold reads "not recorded",
never zero; a feature neither asked for nor seen is left out.

A feature is covered only where every side that ran exercised it: a comparison in which
one side never preempted says nothing about preemption.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Callable

from ..measure.prefill_chunks import MIDDLE, PROMPTS_3PLUS
from ..record.run_record import Check, Manifest, RunSummary
from . import logprobs
from .kv_cache import PREEMPTIONS, PREFIX_HIT_RATE, PREFIX_HITS, PREFIX_QUERIES

SIDES = ("baseline", "candidate")


class Coverage(enum.StrEnum):
    """What a run shows of one feature on one workload."""

    EXERCISED = "exercised"                  # on every side that ran
    ONE_SIDE = "one side only"               # on some sides: the comparison does not cover it
    MISSED = "asked, not exercised"          # the entry asked for it; no side shows it
    NOT_RECORDED = "not recorded"            # the run does not hold the figure that says
    UNSUPPORTED = "unsupported here"         # the workload did not run on this machine


@dataclass(frozen=True)
class Cell:
    """One feature of one workload: what the run shows, and the figures that say so."""

    status: Coverage
    detail: str
    asked: bool = False

    @property
    def covered(self) -> bool:
        return self.status == Coverage.EXERCISED


@dataclass(frozen=True)
class WorkloadCoverage:
    """One workload's features, by name (FEATURES' order); a feature neither asked for nor
    seen is absent. `unsupported`: why this machine did not run the workload (its asked
    features are then "unsupported here")."""

    workload: str
    cells: dict[str, Cell]
    unsupported: str | None = None


@dataclass(frozen=True)
class _Record:
    """What one workload's coverage is read from."""

    workload: str
    kind: str                                   # the workload's kind (gsm8k, sampled, ...)
    params: dict[str, Any]
    figures: dict[str, dict[str, Any]]          # {side that ran: summary figures}
    resolved: dict[str, dict[str, Any]]         # {side: what its engine reported}
    asked_args: dict[str, dict[str, Any]]       # {side: the engine arguments it was given}
    checks: dict[str, Check]                    # {metric: the check}


def _number(x: Any) -> float | None:
    """A recorded count, or None where it is absent or not a number (NaN included)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or math.isnan(x):
        return None
    return float(x)


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}" if float(x).is_integer() or abs(x) >= 100 else f"{x:.3g}"


def _per_side(r: _Record, name: str) -> dict[str, float | None]:
    return {s: _number(f.get(name)) for s, f in r.figures.items()}


def _figures(parts: list[tuple[str, dict[str, Any]]],
             fmt: Callable[[Any], str] = _fmt) -> str:
    """'prompts 8 / 8, middle chunks 31 / 31 (baseline / candidate)': each figure per side
    that ran, the sides named once."""
    sides = list(parts[0][1]) if parts else []
    text = ", ".join(f"{label} {' / '.join(fmt(v.get(s)) for s in sides)}"
                     for label, v in parts)
    return f"{text} ({' / '.join(sides)})" if sides else text


def _judged(got: dict[str, float | None], asked: bool, what: str, counter: str,
            also: list[tuple[str, dict[str, Any]]] = ()) -> Cell | None:
    """A feature that happened on a side where its count `got[side]` > 0: exercised on
    every side that ran, on some, or on none; "not recorded" where a side that ran lacks
    the count (`counter` names it); None when neither asked for nor seen."""
    if not got:
        return Cell(Coverage.MISSED, "no side ran", asked) if asked else None
    said = _figures([(what, got), *[(label, v) for label, v in also
                                    if any(x is not None for x in v.values())]])
    missing = [s for s, v in got.items() if v is None]
    if missing:
        if not asked and not any(got.values()):
            return None
        return Cell(Coverage.NOT_RECORDED, f"the {' and '.join(missing)} recorded no "
                                           f"{counter}; {said}", asked)
    happened = [s for s, v in got.items() if v and v > 0]
    if len(happened) == len(got):
        return Cell(Coverage.EXERCISED, said, asked)
    if happened:
        return Cell(Coverage.ONE_SIDE, said, asked)
    return Cell(Coverage.MISSED, said, asked) if asked else None


def _counted(r: _Record, counter: str, asked: bool, what: str,
             also: list[tuple[str, str]] = ()) -> Cell | None:
    """`_judged` on a counter of the summary's per-side figures, with further figures
    (label, name) beside it."""
    return _judged(_per_side(r, counter), asked, what, counter,
                   [(label, _per_side(r, name)) for label, name in also])


# ---- the features ------------------------------------------------------------------------

# vLLM's SamplingParams names (the sampled workload's parameters), each with when it is on
# and how a reader names it; penalties are one feature (one code path, vLLM's penalties)
SAMPLING_KINDS: tuple[tuple[str, str, Callable[[Any], bool]], ...] = (
    ("temperature", "temperature", lambda v: v > 0),
    ("top_k", "top-k", lambda v: v > 0),
    ("top_p", "top-p", lambda v: v < 1),
    ("min_p", "min-p", lambda v: v > 0),
    ("repetition_penalty", "penalties", lambda v: v != 1),
    ("frequency_penalty", "penalties", lambda v: v != 0),
    ("presence_penalty", "penalties", lambda v: v != 0),
    ("logit_bias", "logit bias", lambda v: bool(v)),
)


def sampling_kinds(params: dict[str, Any]) -> list[str]:
    """The sampling features a workload's parameters turn on, in SAMPLING_KINDS' order
    (an absent field is off: a dump leaves fields at their defaults out), then "seeds
    mixed" where some requests go unseeded beside seeded ones (`unseeded_every`)."""
    out: list[str] = []
    for name, label, on in SAMPLING_KINDS:
        v = params.get(name)
        if v is not None and on(v) and label not in out:
            out.append(label)
    if (params.get("temperature") or 0) > 0 and (params.get("unseeded_every") or 0) > 0:
        out.append("seeds mixed")
    return out


def _sampling(r: _Record) -> Cell | None:
    """Sampling parameters are sent with every request: a side that completed requests
    sampled with them. A workload with no sampling field is greedy by design (absent)."""
    if "temperature" not in r.params:
        return None
    kinds = sampling_kinds(r.params)
    name = f"set {r.params['set']}: " if r.params.get("set") else ""
    what = f"{name}{', '.join(kinds) or 'greedy'}; requests completed"
    return _counted(r, "completed", True, what)


def _chunked_prefill(r: _Record) -> Cell | None:
    want = r.params.get("min_prefill_chunks") or next(
        (x["chunked_prefill"].get("min_chunks") for x in r.resolved.values()
         if isinstance(x.get("chunked_prefill"), dict)), None)
    return _counted(r, PROMPTS_3PLUS, bool(want), "prompts in >= 3 chunks",
                    [("middle chunks", MIDDLE)])


def _marked(r: _Record, key: str, check: str) -> bool:
    """Whether the workload asked for a KV-cache feature: it marks its sides' record
    (`resolved[key]`, what the kv_cache checks key on), or the run holds that check."""
    return any(key in x for x in r.resolved.values()) or check in r.checks


def _preemption(r: _Record) -> Cell | None:
    asked = r.kind == "preemption" or _marked(r, "preemption", "preemption_coverage")
    return _counted(r, PREEMPTIONS, asked, "preemptions")


def _prefix_cache(r: _Record) -> Cell | None:
    asked = r.kind == "prefix-cache" or _marked(r, "prefix_cache", "prefix_cache_coverage") \
        or any(a.get("enable_prefix_caching") is True for a in r.asked_args.values())
    return _counted(r, PREFIX_HITS, asked, "hits", [("queries", PREFIX_QUERIES),
                                                    ("hit rate", PREFIX_HIT_RATE)])


LOGPROBS_MODES = {"raw": "raw_logprobs", "processed": "processed_logprobs"}


def _logprobs(r: _Record) -> Cell | None:
    """Logprobs happened where both sides returned them for the same positions: the
    `logprobs_agreement` check measured (its note counts the positions compared)."""
    mode = r.params.get("mode") if r.kind == "logprobs" else None
    asked = r.kind == "logprobs" or bool(r.params.get("logprobs"))
    c = r.checks.get(logprobs.METRIC)
    if not asked and c is None:
        return None
    what = f"top-{r.params.get('top_n') or r.params.get('logprobs') or '?'} " \
        f"{LOGPROBS_MODES.get(str(mode), mode or 'logprobs')}"
    if c is None and not r.figures:
        return Cell(Coverage.MISSED, "no side ran", asked)
    if c is None:
        return Cell(Coverage.NOT_RECORDED, f"{what}: no {logprobs.METRIC} check", asked)
    if c.note.startswith("not measured"):
        return Cell(Coverage.MISSED, f"{what}: {c.note}", asked)
    return Cell(Coverage.EXERCISED, f"{what}: {c.note.split(';')[0]}", asked)


def _backend_names(text: Any) -> list[str]:
    """'FLASH_ATTN' or 'TORCH (reference paged attention)' or 'A, B' -> its names."""
    return [part.split(" (")[0].strip().upper() for part in str(text).split(",")
            if part.strip()]


def _attention_backend(r: _Record) -> Cell | None:
    """What each engine built (read back), against what the entry asked for."""
    ran = {s: x.get("attention_backend") for s, x in r.resolved.items()}
    asked = {s: a.get("attention_backend") for s, a in r.asked_args.items()
             if isinstance(a.get("attention_backend"), str)
             and a["attention_backend"].lower() != "auto"}
    if not ran:
        return (Cell(Coverage.MISSED, f"asked {', '.join(sorted(set(asked.values())))}; no "
                                      f"side ran", True) if asked else None)
    if any(v in (None, "", "unknown") for v in ran.values()):
        return Cell(Coverage.NOT_RECORDED, "the engines did not report their attention "
                                           "backend", bool(asked))
    names = {s: _backend_names(v) for s, v in ran.items()}
    shown = sorted({n for v in names.values() for n in v})
    said = (", ".join(shown) if len({tuple(v) for v in names.values()}) == 1
            else "; ".join(f"{s} {', '.join(v)}" for s, v in names.items()))
    if not asked:
        return Cell(Coverage.EXERCISED, said)
    got = [s for s in ran if asked.get(s) is None or asked[s].upper() in names[s]]
    want = ", ".join(sorted({v.upper() for v in asked.values()}))
    status = (Coverage.EXERCISED if len(got) == len(ran) else
              Coverage.ONE_SIDE if got else Coverage.MISSED)
    return Cell(status, f"asked {want}, ran {said}", True)


def _spec_decode(r: _Record) -> Cell | None:
    engines = [x.get("engine") or {} for x in r.resolved.values()]
    k = next((e.get("num_speculative_tokens") for e in engines
              if e.get("num_speculative_tokens")), None) or r.params.get("k") \
        or r.params.get("num_speculative_tokens")
    method = next((e.get("speculative_method") for e in engines
                   if e.get("speculative_method")), None) or r.params.get("proposer") \
        or r.params.get("speculative_method")
    what = f"{method} k={k}: drafts" if k else "drafts"
    return _counted(r, "spec_decode_num_drafts", bool(k), what,
                    [("acceptance length", "spec_decode_acceptance_length")])


def _pd(r: _Record) -> Cell | None:
    """A PD pair hands each request's KV from its prefill to its decode engine: vLLM's
    side counts the requests that went through its connector (`pd_requests`); the
    bundled runner times each hand-over (`kv_handoff_ms`), so a side with that time handed
    over every request it completed."""
    asked = r.params.get("mode") == "pd" or any(
        (x.get("engine") or {}).get("pd_disagg") for x in r.resolved.values())
    if not asked:
        return None
    got = {s: _number(f.get("pd_requests")) if "pd_requests" in f else
           _number(f.get("completed")) if _number(f.get("mean_kv_handoff_ms")) is not None
           else None for s, f in r.figures.items()}
    connector = next((str(x["pd"].get("connector", "")).split(" (")[0]
                      for x in r.resolved.values() if isinstance(x.get("pd"), dict)), None)
    what = f"{connector}: requests handed over" if connector else "requests handed over"
    return _judged(got, True, what, "pd_requests or kv_handoff_ms")


def _warmup(r: _Record) -> Cell | None:
    """Warmup coverage is the `unwarmed_dispatch` check: there where the engines logged
    the batch classes their warmup ran and serving used."""
    c = r.checks.get("unwarmed_dispatch")
    if c is None:
        return (Cell(Coverage.NOT_RECORDED, "no dispatch log (no unwarmed_dispatch check)",
                     True) if r.kind == "warmup" else None)
    served = c.note.split("serving classes: ")[-1] if "serving classes: " in c.note else "-"
    never = _figures([("classes never warmed", {"baseline": c.baseline,
                                                "candidate": c.candidate})])
    return Cell(Coverage.EXERCISED, f"served {served}; {never}", r.kind == "warmup")


def _setting(v: Any) -> str:
    return "not recorded" if v is None else ("on" if v else "off") if isinstance(v, bool) \
        else str(v)


def _graphs(r: _Record) -> Cell | None:
    """CUDA graphs and async scheduling, where the engines recorded them."""
    modes = {s: x.get("cudagraph_mode") for s, x in r.resolved.items()}
    asyncs = {s: (x.get("engine") or {}).get("async_scheduling", x.get("async_scheduling"))
              for s, x in r.resolved.items()}
    used = [(bool(m) and str(m).upper() != "NONE") or asyncs[s] is True
            for s, m in modes.items()]
    if not any(used):
        return None
    said = _figures([("CUDA graphs", modes), ("async scheduling", asyncs)], _setting)
    return Cell(Coverage.EXERCISED if all(used) else Coverage.ONE_SIDE, said)


FEATURES: dict[str, Callable[[_Record], Cell | None]] = {
    "sampling": _sampling,
    "chunked prefill": _chunked_prefill,
    "preemption": _preemption,
    "prefix cache": _prefix_cache,
    "logprobs": _logprobs,
    "attention backend": _attention_backend,
    "spec decode": _spec_decode,
    "PD": _pd,
    "warmup coverage": _warmup,
    "CUDA graphs / async": _graphs,
}


# ---- reading a run -----------------------------------------------------------------------

def _entry_args(manifest: Manifest, entry: str) -> dict[str, Any]:
    suite = manifest.suite or {}
    for w in suite.get("workloads") or []:
        if isinstance(w, dict) and w.get("id") == entry:
            return dict(w.get("engine_args") or {})
    return {}


def _records(manifest: Manifest | None, summary: RunSummary) -> list[_Record]:
    manifest = manifest or Manifest()
    names = list(dict.fromkeys([*manifest.workloads, *summary.metrics,
                                *(c.workload for c in summary.checks)]))
    out = []
    for w in names:
        info = manifest.workloads.get(w) or {}
        entry_args = _entry_args(manifest, str(info.get("entry", w)))
        sides = manifest.sides or {}
        out.append(_Record(
            workload=w, kind=str(info.get("workload") or w.split(".")[0].split("@")[0]),
            params=dict(info.get("params") or {}),
            figures={s: f for s, f in (summary.metrics.get(w) or {}).items()
                     if s in SIDES and isinstance(f, dict)},
            resolved={s: r for s in SIDES if (r := manifest.resolved_side(w, s))},
            asked_args={s: {**entry_args, **((sides.get(s) or {}).get("engine_args") or {})}
                        for s in SIDES},
            checks={c.metric: c for c in summary.checks if c.workload == w}))
    return out


def run_coverage(manifest: Manifest | None, summary: RunSummary) -> list[WorkloadCoverage]:
    """Each workload of a run (the manifest's order) with its features. A workload this
    machine did not run ("unsupported here" on a side, so on neither) shows the reason,
    and the features it asked for as unsupported."""
    reasons: dict[str, dict[str, str]] = {}
    for u in summary.unsupported:
        reasons.setdefault(u.workload, {})[u.side] = u.reason.removesuffix(
            " (unsupported here)")
    why = {w: next(iter(by.values())) if len(set(by.values())) == 1
           else "; ".join(f"{side}: {text}" for side, text in by.items())
           for w, by in reasons.items()}
    out = []
    for r in _records(manifest, summary):
        skipped = why.get(r.workload) if not r.figures else None
        cells = {}
        for name, feature in FEATURES.items():
            cell = feature(r)
            if cell is not None and skipped:
                cell = Cell(Coverage.UNSUPPORTED, "not run here", cell.asked) \
                    if cell.asked else None
            if cell is not None:
                cells[name] = cell
        out.append(WorkloadCoverage(r.workload, cells, skipped))
    return out


def tally(rows: list[WorkloadCoverage]) -> dict[Coverage, int]:
    """How many (workload, feature) cells of each status, every status named."""
    n = {s: 0 for s in Coverage}
    for row in rows:
        for c in row.cells.values():
            n[c.status] += 1
    return n
