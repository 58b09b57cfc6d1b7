"""The contract between workloads and the harness: the only part of mrbench a workload
imports. Keeping it small is the point: a workload written against it runs on every target,
and the harness can change how it drives engines without touching workloads.

- the engine session a workload drives (`Session`, `EngineOptions`, `Completion`, ...);
- the workload protocol and the driver the harness lends it (`Workload`, `Driver`);
- result types (`SideResult`, `SideFailure`, `Batch`);
- `BadInput`, the error for the user's mistakes;
- `data_dir()`, where datasets and traces are read from (`check_rows`: a packaged slice
  asked for more rows than it holds).
"""
from .errors import BadInput
from .paths import DATA_DIR_ENV, check_rows, data_dir
from .results import Batch, SideFailure, SideResult
from .session import (
    AuditSample,
    Completion,
    EngineOptions,
    FrozenArgs,
    Sampling,
    Session,
    Step,
    TimedPrompt,
    TokenLogprob,
)
from .workload import Driver, Outcome, Workload, WorkloadBase

__all__ = [
    "BadInput", "DATA_DIR_ENV", "check_rows", "data_dir", "Batch", "SideFailure", "SideResult",
    "AuditSample", "Completion", "EngineOptions", "FrozenArgs", "Sampling", "Session", "Step",
    "TimedPrompt", "TokenLogprob",
    "Driver", "Outcome", "Workload", "WorkloadBase",
]
