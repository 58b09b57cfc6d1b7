"""The workload protocol, and the driver the harness lends a workload to run a batch.

A workload is configuration plus a way to turn it into batches and figures: it never opens
engines, times waves or profiles. The harness does that, through the `Driver` it passes to
`run`, so the same workload runs on every target and in every campaign.
"""
from __future__ import annotations

from typing import Any, ClassVar, Protocol, Sequence, runtime_checkable

from pydantic import BaseModel

from .results import Batch, SideFailure, SideResult
from .session import Completion, EngineOptions, Session

Outcome = tuple[dict[str, SideResult], dict[str, SideFailure]]


class Driver(Protocol):
    """Runs a batch on every side at once (interleaved ABBA waves, then a profiled pass)."""

    device: str

    def interleaved(self, sessions: dict[str, Session], batch: Batch
                    ) -> tuple[dict[str, SideResult], dict[str, list[Completion]],
                               dict[str, SideFailure]]:
        """(results, completions, failures) per side; a side that raised is in failures."""


@runtime_checkable
class Workload(Protocol):
    """What the harness calls on a workload, in this order: `Params` validates the suite's
    params; `points` splits a sweep into engine shapes; per point `engine_options`;
    `prepare` loads or generates the items once; `check_items` against the model's context;
    `run` on the open sessions; `source` names the items for the manifest."""

    name: str
    description: str
    Params: type[BaseModel]
    needs: frozenset[str]          # session features it cannot run without (e.g. "pd")

    def points(self, p: Any) -> Sequence[tuple[str, Any]]: ...

    def engine_options(self, p: Any) -> EngineOptions: ...

    def prepare(self, p: Any) -> list: ...

    def check_items(self, p: Any, items: list, context_len: int) -> None: ...

    def source(self, p: Any) -> str: ...

    def run(self, sessions: dict[str, Session], items: list, p: Any, driver: Driver
            ) -> Outcome: ...


class WorkloadBase:
    """Defaults for the optional parts of `Workload`: one point, items need no check."""

    name: ClassVar[str]
    description: ClassVar[str]
    needs: ClassVar[frozenset[str]] = frozenset()

    def points(self, p: Any) -> Sequence[tuple[str, Any]]:
        """One engine shape, unnamed (a sweep overrides this)."""
        return [("", p)]

    def check_items(self, p: Any, items: list, context_len: int) -> None:
        """Nothing to check up front (a workload with fixed-length items overrides this)."""
