"""Engine arguments: the engine's own `LLM(...)` arguments by the engine's names
(tensor_parallel_size, max_model_len, dtype, kv_cache_dtype, quantization, block_size,
enforce_eager, attention_backend, ...), from a suite and the command line.

Where they come from, later ones winning: a suite's `engine_args`, a workload entry's
`engine_args` (harness.record.suite folds the suite's into each entry), then
`--engine-arg [SIDE:]NAME=VALUE` (both sides, or `baseline:`/`candidate:` alone). A suite's
are a shape's (`EngineOptions.engine_args`): workloads with different ones get different
engines. The command line's are a side's (`SideSpec.engine_args`), so that one run can
compare one vLLM with and without an argument.

A suite may also sweep an argument (`sweep: {attention_backend: [...]}`, record.suite):
each value is an entry of its own, and the target, not this check, says whether it has
the value here (`swept`).

Why checked here, for every side and shape, before any engine starts: a misspelt name
or a wrong value would otherwise surface as a failed engine start minutes into a run, or
worse, be ignored. Each target checks its own (`Target.check_engine_args`); a target
without that check (the bundled runner: it has no vLLM engine) takes none.
"""
from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any, Iterable

import yaml

from mrbench.contract import BadInput, EngineOptions, FrozenArgs

from ..record.suite import SWEEP_AXES
from .targets.base import SideSpec, engine_args_of

SIDES = ("baseline", "candidate")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_value(text: str) -> Any:
    """VALUE of NAME=VALUE: JSON where it is JSON (`2`, `true`, `1e5`, `{"a": 1}`, `null`),
    else a YAML scalar (`fp8`, `bfloat16`: a string)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_cli(items: Iterable[str]) -> dict[str | None, dict[str, Any]]:
    """`--engine-arg [SIDE:]NAME=VALUE` values as {None (both sides) | side: {name: value}};
    a later value of one name wins. BadInput (one line) for a malformed one."""
    out: dict[str | None, dict[str, Any]] = {}
    for item in items:
        key, eq, text = item.partition("=")
        side, colon, name = key.rpartition(":")
        if not eq or not text.strip() or not _NAME.match(name) or (colon and not side):
            raise BadInput(f"--engine-arg {item!r}: write NAME=VALUE or SIDE:NAME=VALUE "
                           f"(e.g. max_model_len=4096, candidate:enforce_eager=true)")
        if colon and side not in SIDES:
            raise BadInput(f"--engine-arg {item!r}: the side is {' or '.join(SIDES)}, "
                           f"not {side!r}")
        out.setdefault(side or None, {})[name] = parse_value(text)
    return out


def with_cli(base: SideSpec, cand: SideSpec, items: Iterable[str]
             ) -> tuple[SideSpec, SideSpec]:
    """The two sides with the command line's engine arguments (both sides', then each
    side's own on top)."""
    parsed = parse_cli(items)
    both = parsed.get(None, {})

    def side(sp: SideSpec, name: str) -> SideSpec:
        args = {**sp.engine_args, **both, **parsed.get(name, {})}
        return replace(sp, engine_args=FrozenArgs(args)) if args else sp
    return side(base, "baseline"), side(cand, "candidate")


def shape_options(options: EngineOptions, entry: Any) -> EngineOptions:
    """A workload's engine options with its suite entry's `engine_args` (the suite's folded
    in); unchanged where the entry has none."""
    args = getattr(entry, "engine_args", None) or {}
    return replace(options, engine_args=FrozenArgs(args)) if args else options


def swept(side: SideSpec, options: EngineOptions) -> dict[str, Any]:
    """The sweep axes' values a suite gave this shape (record.suite.SWEEP_AXES; the command
    line's own value of an axis is an engine argument like any other). Not checked as
    engine arguments: the target says whether it has each value here (`unsupported`), so
    a value this machine lacks is "unsupported here", not bad input."""
    return {a: options.engine_args[a] for a in SWEEP_AXES
            if a in options.engine_args and a not in side.engine_args}


def check(targets: dict[str, Any], specs: dict[str, SideSpec],
          shapes: Iterable[EngineOptions]) -> None:
    """Every side's engine arguments for every shape, by its target, before any engine
    starts; BadInput (one line) for the first bad one. Each distinct set is checked once;
    a suite's sweep axes are left to the target's `unsupported` (`swept`)."""
    shapes = list(shapes) or [EngineOptions()]
    for name, sp in specs.items():
        seen: set[FrozenArgs] = set()
        for o in shapes:
            axes = swept(sp, o)
            args = FrozenArgs({k: v for k, v in engine_args_of(sp, o).items() if k not in axes})
            if not args or args in seen:
                continue
            seen.add(args)
            fn = getattr(targets[sp.target], "check_engine_args", None)
            if fn is None:
                raise BadInput(f"the {sp.target} target takes no engine arguments (they are "
                               f"vLLM's LLM(...) arguments; the {name} side runs "
                               f"{sp.target}:{sp.runner}): got {describe(args)}")
            fn(sp, args)


def describe(args: dict[str, Any]) -> str:
    """`k=v, k2=v2` (sorted), as the plan line and the messages write them."""
    return ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in sorted(args.items()))
