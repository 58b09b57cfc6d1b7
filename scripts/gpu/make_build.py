#!/usr/bin/env python3
"""A second vLLM build for a two-build study where no package index is (the GPU machine):
the vLLM of a site folder (the kit's) as links, with one historic Model Runner V2 fault
written back into its source, the line the fix replaced restored (harness.run.targets.vllm.
faults has the lines; harness.run.builds.overlay makes the build). With no --fault the
build is the same code in another place: the clean A/B pair.

Each patch's line is looked for inside the function its fault names (the file parsed with
`ast`, the class and method by qualname), as the in-process fault does on the function's
own source: a line that also stands in another function is not the one meant, and a fault
with several patches in one file gets them all.

Usage: make_build.py SRC_SITE DEST [--fault NAME]
Then:  mrbench run gpu-ab --target vllm --device cuda \
           --candidate vllm@DEST:v2 --baseline vllm@SRC_SITE:v2
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

from mrbench.contract import BadInput
from mrbench.harness.run.builds import overlay
from mrbench.harness.run.targets.vllm.faults import FAULTS, SourcePatch, patched_source


def _defs(body: list[ast.stmt]) -> list[ast.stmt]:
    """The classes and functions a body defines, also under `if`/`try`/`with` (a module
    defines some of its functions conditionally)."""
    out: list[ast.stmt] = []
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append(node)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "handlers", "finalbody"):
                for sub in getattr(node, block, []):
                    out.extend(_defs(sub.body if isinstance(sub, ast.ExceptHandler)
                                     else [sub]))
    return out


def function_lines(text: str, qualname: str) -> tuple[int, int]:
    """The 0-based [start, end) line range of `qualname` ("Class.method" or "function")
    in the module source `text`, decorators included, as `inspect.getsource` gives the
    function to the in-process fault; BadInput if it is not defined there exactly once."""
    body: list[ast.stmt] = ast.parse(text).body
    node: ast.stmt | None = None
    for part in qualname.split("."):
        hits = [d for d in _defs(body) if getattr(d, "name", None) == part]
        if len(hits) != 1:
            raise BadInput(f"{qualname}: {part} is defined {len(hits)} times there "
                           "(expected once)")
        node = hits[0]
        body = node.body            # type: ignore[attr-defined]
    assert node is not None and node.end_lineno is not None
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return first - 1, node.end_lineno


def patched_text(text: str, p: SourcePatch, rel: str) -> str:
    """`text` (one module's source) with `p.old` replaced by `p.new` inside `p.qualname`
    only, at the line's own indentation; BadInput (one line) unless the line is there
    exactly once."""
    start, end = function_lines(text, p.qualname)
    lines = text.splitlines(True)
    try:
        new = patched_source("".join(lines[start:end]), p)
    except ValueError as e:
        raise BadInput(f"{rel}: {e}") from None
    return "".join(lines[:start]) + new + "".join(lines[end:])


def fault_edits(src: Path, name: str) -> dict[str, str]:
    """{file under vllm/: its whole new text} of a fault: every patch of the fault applied,
    in order, to its module's file (several patches of one file each find their line in
    the text the ones before them left)."""
    texts: dict[str, str] = {}
    for p in FAULTS[name].patches:
        if p.module.split(".")[0] != "vllm":
            raise BadInput(f"{name}: {p.module} is not a module of vllm")
        rel = "/".join(p.module.split(".")[1:]) + ".py"
        if rel not in texts:
            f = src / rel
            if not f.is_file():
                raise BadInput(f"{name}: {src / rel} does not exist")
            texts[rel] = f.read_text()
        texts[rel] = patched_text(texts[rel], p, rel)
    return texts


def main(argv: list[str] | None = None) -> int:
    """Make the build; 2 and one line on stderr for a bad site, fault line or DEST."""
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("src_site", type=Path)
    a.add_argument("dest", type=Path)
    a.add_argument("--fault", choices=sorted(FAULTS))
    args = a.parse_args(argv)
    src = args.src_site / "vllm"
    try:
        if not (src / "__init__.py").is_file():
            raise BadInput(f"{args.src_site} holds no vllm/ package")
        edits = fault_edits(src, args.fault) if args.fault else {}
        overlay(args.dest, edits, src)
    except (BadInput, FileExistsError) as e:
        print(f"make_build.py: {e}", file=sys.stderr)
        return 2
    print(f"build {args.dest}: vLLM of {args.src_site}"
          + (f" with {args.fault} (PR {FAULTS[args.fault].pr}) written back" if args.fault
             else ", unchanged"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
