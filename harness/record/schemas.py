"""The JSON Schema of each file mrbench writes from a typed record: a run's summary.json and
manifest.json (run_record), a fault campaign's faults.json (campaign_record), and a
calibration's calibration.json and a power study's power.json (study_record). docs/schema/
publishes them and `mrbench schema WHICH` prints them, so a tool that reads mrbench's files
can validate against exactly what this mrbench writes and reads."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from .campaign_record import FaultMatrix
from .run_record import Manifest, RunSummary
from .study_record import Calibration, PowerStudy

SCHEMAS: dict[str, type[BaseModel]] = {"summary": RunSummary, "manifest": Manifest,
                                       "faults": FaultMatrix, "calibration": Calibration,
                                       "power": PowerStudy}


def json_schema(which: str) -> dict[str, Any]:
    """The JSON Schema of one file (what a reader accepts): JSON Schema 2020-12, as
    pydantic generates it."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            **SCHEMAS[which].model_json_schema()}
