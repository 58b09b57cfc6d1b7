#!/usr/bin/env python3
"""A second vLLM build for a two-build study where no package index is (the GPU machine):
the vLLM of a site folder (the kit's) as links, with one historic Model Runner V2 fault
written back into its source, the line the fix replaced restored (harness.targets.
vllm_faults has the lines; harness.builds.overlay makes the build). With no --fault the
build is the same code in another place: the clean A/B pair.

Usage: make_build.py SRC_SITE DEST [--fault NAME]
Then:  mrbench run gpu-ab --target vllm --device cuda \
           --candidate vllm@DEST:v2 --baseline vllm@SRC_SITE:v2
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mrbench.contract import BadInput
from mrbench.harness.run.builds import overlay
from mrbench.harness.run.targets.vllm_faults import FAULTS


def fault_edits(src: Path, name: str) -> dict[str, tuple[str, str]]:
    """{file under vllm/: (the fixed line as it stands, the pre-fix line(s))} of a fault."""
    edits = {}
    for p in FAULTS[name].patches:
        rel = "/".join(p.module.split(".")[1:]) + ".py"
        lines = [ln for ln in (src / rel).read_text().splitlines(True)
                 if ln.strip() == p.old.strip()]
        if len(lines) != 1:
            raise BadInput(f"{rel}: the line of {name} occurs {len(lines)} times")
        indent = lines[0][:len(lines[0]) - len(lines[0].lstrip())]
        edits[rel] = (lines[0], "".join(indent + ln + "\n" for ln in p.new.splitlines()))
    return edits


def main() -> int:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("src_site", type=Path)
    a.add_argument("dest", type=Path)
    a.add_argument("--fault", choices=sorted(FAULTS))
    args = a.parse_args()
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
