"""The one registry of faults: what a run can break on purpose, on each target.

A fault is put on the candidate (`--fault NAME`, `mrbench faults`), and the checks must
find the damage. Three kinds:
- `RUNNER`: a switch in the bundled runner that restores the code path of a historic MRv2
  regression (runner_impl/faults.py keeps the switches; the bundled target registers them);
- `BUILD`: a source patch that puts a historic Model Runner V2 bug back into vLLM in the
  engine's process (targets/vllm/faults.py; the vllm target registers them);
- `RULER`: `slow-step:PCT`, every serving step made PCT % slower on either target and
  runner: a known slowdown to measure detection power against (`mrbench power`), not a bug.
  It is defined here, for every target, and never part of a catch matrix.

A coverage fault breaks a code path that only some workloads reach (one attention backend,
spec decode): `mrbench faults` runs it only when named. Targets register theirs when they
are imported; the campaigns and commands read them here.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Iterable

from mrbench.contract import BadInput


class FaultKind(str, enum.Enum):
    RUNNER = "runner"
    BUILD = "build"
    RULER = "ruler"
    CONNECTOR = "connector"      # the measuring KV connector's own (the vllm target's NIXL)


@dataclass(frozen=True)
class Fault:
    """One fault a target offers."""

    name: str
    kind: FaultKind
    what: str                    # the bug it brings back, in one line, for people
    coverage: bool = False       # reached only by some workloads: run only when named


RULER = "slow-step"
RULER_MAX_PCT = 1000.0

_BY_TARGET: dict[str, dict[str, Fault]] = {}


def register(target: str, faults: Iterable[Fault]) -> None:
    """Add a target's faults (a target's module calls this when it is imported)."""
    _BY_TARGET.setdefault(target, {}).update({f.name: f for f in faults})


def of_target(target: str) -> dict[str, Fault]:
    """The faults `target` registered, by name (the ruler is not among them)."""
    return dict(_BY_TARGET.get(target, {}))


def owner(target: Any) -> str:
    """The name a target's faults are registered under: its `fault_owner` where it has one
    (a target built on the bundled one offers the bundled runner's faults), else its name."""
    return getattr(target, "fault_owner", None) or target.name


def catch_matrix(target: str) -> list[str]:
    """The faults `mrbench faults` runs on `target` unless others are named: every
    registered fault that is not a coverage fault, sorted."""
    return sorted(n for n, f in of_target(target).items() if not f.coverage)


def coverage_faults(target: str) -> list[str]:
    """`target`'s coverage faults (run only when named), sorted."""
    return sorted(n for n, f in of_target(target).items() if f.coverage)


def ruler_pct(name: str) -> float | None:
    """PCT of a `slow-step:PCT` fault name; None for any other name. BadInput (one line)
    for `slow-step` with a missing or out-of-range PCT."""
    if name != RULER and not name.startswith(RULER + ":"):
        return None
    try:
        pct = float(name.split(":", 1)[1])
    except (IndexError, ValueError):
        raise BadInput(f"{name!r}: write {RULER}:PCT, e.g. {RULER}:10") from None
    if not 0 < pct <= RULER_MAX_PCT:
        raise BadInput(f"{name!r}: PCT must be in (0, {RULER_MAX_PCT:g}]")
    return pct


def ruler_name(pct: float) -> str:
    """The fault name of a PCT % ruler: `slow-step:PCT`."""
    return f"{RULER}:{pct:g}"


def split(faults: tuple[str, ...]) -> tuple[tuple[str, ...], float | None]:
    """(the historic fault names, the ruler's PCT or None). BadInput (one line) for a
    malformed `slow-step` entry or more than one."""
    historic: list[str] = []
    pcts: list[float] = []
    for name in faults:
        pct = ruler_pct(name)
        if pct is None:
            historic.append(name)
        else:
            pcts.append(pct)
    if len(pcts) > 1:
        raise BadInput(f"one {RULER}:PCT per side, got {len(pcts)}")
    return tuple(historic), (pcts[0] if pcts else None)
