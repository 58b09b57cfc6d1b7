"""`mrbench schema summary|manifest|faults|calibration|power`: the JSON Schema of a run's
summary.json or manifest.json, or of a campaign's faults.json, calibration.json or
power.json, printed as JSON.

Why a command: the schemas are generated from the record's models
(harness/record/schemas.py), so a tool that reads runs can validate against exactly what
this mrbench writes and reads; docs/schema/ holds the output committed, and a unit test
fails when the models and the committed files part.
"""
from __future__ import annotations

import argparse
import json

from ..record.errors import EXIT_PASS
from ..record.schemas import SCHEMAS, json_schema


def schema_text(which: str) -> str:
    """The schema as docs/schema/<which>.schema.json holds it (indented, newline-ended)."""
    return json.dumps(json_schema(which), indent=2) + "\n"


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`mrbench schema` and its argument."""
    p = sub.add_parser("schema", help="the JSON Schema of a result file: a run's "
                                      "summary.json or manifest.json, a campaign's "
                                      "faults.json, calibration.json or power.json "
                                      "(docs/schema/ holds them)")
    p.add_argument("which", choices=sorted(SCHEMAS),
                   help="summary (summary.json), manifest (manifest.json), faults "
                        "(faults.json), calibration (calibration.json) or power (power.json)")
    return p


def main(a: argparse.Namespace) -> int:
    print(schema_text(a.which), end="")
    return EXIT_PASS
