"""Suites: YAML files naming workloads, their parameters and the gate's thresholds.

Validated on load (pydantic), so a typo in a suite is one clear error line before anything
runs. Shipped suites live in harness/suites/; a path to any YAML file works too.
"""
from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from mrbench.contract import BadInput
from mrbench.workloads import get_workload, workloads

from .metrics import LATENCY, LATENCY_METRICS, PERCENTILES, checked_percentiles, current_name

SUITES_DIR = Path(__file__).resolve().parents[1] / "suites"
# Engine arguments an entry may sweep (`sweep: {NAME: [VALUE, ...]}`, by vLLM's names): the
# entry becomes one entry per value, `ID@VALUE`, each with that value among its engine
# arguments, its own engines and its own verdict. Each target says, before any engine
# starts, whether it has the value here (`Target.unsupported`: vLLM's registry and imports,
# the bundled runner's one backend); one it has not is "unsupported here", never a failure.
SWEEP_AXES = ("attention_backend",)
_SWEEP_VALUE = re.compile(r"^[A-Za-z0-9_.-]+$")


class Thresholds(BaseModel):
    """Practical thresholds: a regression must be significant AND at least this large."""

    model_config = ConfigDict(extra="forbid")
    alpha: float = Field(0.05, gt=0, lt=1)                 # significance level of every test
    latency_rel: float = Field(0.25, ge=0)                 # P99 may grow by this fraction
    median_rel: float | None = Field(None, ge=0)           # median step / TPOT, per ABBA
                                                           # wave; None: reported, not gated
    # the sd of one engine pair's log latency ratio between pairs (relative), from A/A
    # runs (`mrbench calibrate`): what a pair carries for its process's life, which its
    # waves cannot average; None: pairs are taken as free of it (checks/latency.py)
    pair_sd_rel: float | None = Field(None, ge=0)
    latency_metrics: list[str] = list(LATENCY_METRICS)
    accuracy_drop: float = Field(0.02, ge=0, le=1)         # strict-match accuracy, absolute
    # spec decode: the candidate's mean acceptance length (AL) may fall by this fraction
    # (relative; paired per request, significant at alpha). 5 %: a quarter of the AL cut of
    # vLLM's strict acceptance (PR 40651, about -20 %). Greedy runners that agree on tokens
    # verify the same drafts, so their ALs agree exactly (bundled V2 and V1 do)
    acceptance_drop: float = Field(0.05, ge=0, le=1)
    agreement_min: float = Field(0.99, ge=0, le=1)         # share of requests with equal tokens
    parity_min: float = Field(0.99, ge=0, le=1)            # cross-engine: share of equal tokens
    syncs_increase: float = Field(0.0, ge=0)               # hot-path syncs/step over baseline
    syncs_budget: float | None = Field(0.0, ge=0)          # absolute hot-path syncs/step cap
    audit_violations: int = Field(0, ge=0)                 # state-audit steps out of bounds
    ops_increase: float = Field(0.0, ge=0)                 # ops/step per phase over reference
    allocs_increase: float = Field(0.0, ge=0)              # allocations/step over reference
    launches_increase: float = Field(0.0, ge=0)            # CUDA kernel launches/step per phase
    # with --history: a latency ratio over the earlier passing runs' (harness.history_gate);
    # None: the check's own bar (median_rel for medians, latency_rel for P99s)
    history_rel: float | None = Field(None, ge=0)

    @field_validator("latency_metrics")
    @classmethod
    def _current_names(cls, names: list[str]) -> list[str]:
        """A suite written before results format 3 lists `p99_e2e_ms`: it gates vLLM's
        `p99_e2el_ms` (metrics.current_name), so old suites run as they did."""
        return [current_name(m) for m in names]

    @model_validator(mode="after")
    def _known_latency_metrics(self) -> "Thresholds":
        bad = [m for m in self.latency_metrics if m not in LATENCY]
        if bad:
            raise ValueError(f"unknown latency metric(s) {bad}; known: {tuple(LATENCY)}")
        return self


class WorkloadEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # `ID@VALUE` for a point of a swept entry (Suite expands `sweep`)
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+(@[A-Za-z0-9_.-]+)*$")
    workload: str
    params: dict[str, Any] = {}
    thresholds: dict[str, Any] = {}       # overrides of the suite's thresholds for this one
    # the timed waves cut over this many pairs of engines, each pair started afresh: a
    # host-bound engine keeps a speed of its own for life, which only more pairs average
    # (harness.run.execute.drive_interleaved; docs/vllm-gpu.md, "Engine pairs")
    engine_pairs: int = Field(1, ge=1, le=8)
    # the engine's own arguments by its names (vLLM's EngineArgs), over the suite's; the
    # target checks them before any engine starts (harness.run.engine_args)
    engine_args: dict[str, Any] = {}
    # engine arguments swept over (SWEEP_AXES): the suite expands the entry, one per value
    sweep: dict[str, list[Any]] = {}

    @field_validator("engine_args")
    @classmethod
    def _argument_names(cls, v: dict[str, Any]) -> dict[str, Any]:
        bad = [k for k in v if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k)]
        if bad:
            raise ValueError(f"engine argument name {bad[0]!r} is not a name")
        return v

    @model_validator(mode="after")
    def _known_axes(self) -> "WorkloadEntry":
        for axis, values in self.sweep.items():
            if axis not in SWEEP_AXES:
                raise ValueError(f"sweep: {axis!r} is not a sweep axis (axes: "
                                 f"{', '.join(SWEEP_AXES)})")
            if axis in self.engine_args:
                raise ValueError(f"sweep: {axis} is also among the entry's engine_args; "
                                 f"sweep it or set it, not both")
            bad = [v for v in values if not isinstance(v, str) or not _SWEEP_VALUE.match(v)]
            if not values or bad or len(set(values)) < len(values):
                raise ValueError(f"sweep: {axis} takes a list of distinct names "
                                 f"([A-Za-z0-9_.-]), got {values!r}")
        return self

    def expanded(self) -> list["WorkloadEntry"]:
        """This entry, or one entry per point of its sweep (`ID@VALUE`, the axes' values in
        the sweep's order), each with its values among its engine arguments and no sweep."""
        if not self.sweep:
            return [self]
        axes = list(self.sweep)
        return [self.model_copy(deep=True, update=dict(
            id="@".join([self.id, *point]), sweep={},
            engine_args={**self.engine_args, **dict(zip(axes, point))}))
            for point in itertools.product(*(self.sweep[a] for a in axes))]


class Suite(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    thresholds: Thresholds = Field(default_factory=Thresholds)
    # the summary's pNN_ statistics, as `vllm bench serve --metric-percentiles` chooses
    # them; `mrbench run --percentiles` overrides
    percentiles: tuple[float, ...] = PERCENTILES
    engine_args: dict[str, Any] = {}      # every entry's, under the entry's own (folded in)
    workloads: list[WorkloadEntry] = Field(min_length=1)

    @field_validator("percentiles")
    @classmethod
    def _checked_percentiles(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        return checked_percentiles(v)

    @model_validator(mode="after")
    def _fold_engine_args(self) -> "Suite":
        """Each entry's engine_args with the suite's under them, so that an entry carries
        what its engines get wherever it goes (a selection, suites run together); then
        each swept entry expanded into its points (a sweep's value over the suite's)."""
        if self.engine_args:
            WorkloadEntry._argument_names(self.engine_args)
            for w in self.workloads:
                w.engine_args = {**{k: v for k, v in self.engine_args.items()
                                    if k not in w.sweep}, **w.engine_args}
        self.workloads = [p for w in self.workloads for p in w.expanded()]
        return self

    @model_validator(mode="after")
    def _unique_ids(self) -> "Suite":
        ids = [w.id for w in self.workloads]
        dup = {i for i in ids if ids.count(i) > 1}
        if dup:
            raise ValueError(f"duplicate workload ids {sorted(dup)}")
        for w in self.workloads:
            self.thresholds_for(w.id)
        return self

    def thresholds_for(self, workload_id: str) -> Thresholds:
        """The suite's thresholds with the workload entry's overrides on top (validated)."""
        entry = next(w for w in self.workloads if w.id == workload_id)
        if not entry.thresholds:
            return self.thresholds
        try:
            return Thresholds.model_validate({**self.thresholds.model_dump(), **entry.thresholds})
        except ValidationError as e:
            err = e.errors()[0]
            raise ValueError(f"workload {workload_id!r} thresholds: "
                             f"{'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def _one_line(e: ValidationError) -> str:
    err = e.errors()[0]
    loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
    more = f" (+{len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
    return f"{loc}: {err['msg']}{more}"


def shipped_suites() -> list[str]:
    return sorted(p.stem for p in SUITES_DIR.glob("*.yaml"))


def load_suite(name_or_path: str) -> Suite:
    """A shipped suite by name, or a YAML file by path; workload params are validated too.

    `SUITE:ID[,ID...]` keeps only those entries, with the suite's thresholds: one entry of a
    suite run again, or a calibration study of the entries that matter, without a copy of
    the suite file that could drift from it."""
    base, sep, ids = name_or_path.rpartition(":")
    if sep and base and not Path(name_or_path).is_file():
        return select_entries(load_suite(base), [i.strip() for i in ids.split(",")])
    path = Path(name_or_path)
    if not path.suffix:
        path = SUITES_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            raise BadInput(f"unknown suite {name_or_path!r}; shipped: {', '.join(shipped_suites())}")
    elif not path.is_file():
        raise BadInput(f"suite file {name_or_path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise BadInput(f"suite {path}:{where} malformed YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(data, dict):
        raise BadInput(f"suite {path}: expected a mapping at the top level")
    try:
        suite = Suite.model_validate(data)
    except ValidationError as e:
        raise BadInput(f"suite {path}: {_one_line(e)}") from None
    for w in suite.workloads:
        try:
            wl = get_workload(w.workload)
        except BadInput as e:
            raise BadInput(f"suite {path}: workload {w.id!r}: {e}") from None
        try:
            wl.Params.model_validate(w.params)
        except ValidationError as e:
            raise BadInput(f"suite {path}: workload {w.id!r}: {_one_line(e)}") from None
    return suite


def select_entries(suite: Suite, ids: list[str]) -> Suite:
    """`suite` with only the entries `ids`, in the suite's order; BadInput for an unknown id.
    The id of a swept entry selects all its points (`gsm8k` selects `gsm8k@FLASH_ATTN`, ...)."""
    known = [w.id for w in suite.workloads]

    def chosen(wid: str) -> bool:
        return wid in ids or wid.split("@")[0] in ids

    def first(i: str) -> int | None:
        return next((n for n, k in enumerate(known) if k == i or k.split("@")[0] == i), None)
    unknown = [i for i in ids if first(i) is None]
    if unknown or not any(ids):
        raise BadInput(f"suite {suite.name} has no entry {(unknown or [''])[0]!r}; "
                       f"its entries: {', '.join(known)}")
    return suite.model_copy(update=dict(
        name=f"{suite.name}.{'+'.join(sorted(dict.fromkeys(ids), key=first))}",
        workloads=[w for w in suite.workloads if chosen(w.id)]))


def single_workload_suite(workload: str) -> Suite:
    """`mrbench run gsm8k`: one workload with its default parameters."""
    get_workload(workload)
    return Suite(name=workload, workloads=[WorkloadEntry(id=workload, workload=workload)])


def named_suite(what: list[str]) -> Suite:
    """The suite a command's positional names make: shipped suites, YAML paths (either with
    `:ID,...`), workload names (a name that is both a workload and a shipped suite is the
    suite). Several are joined into one, named `A+B`, with the first one's thresholds and
    percentiles; an entry id that two of them share is BadInput."""
    suites = [single_workload_suite(w) if w in workloads() and w not in shipped_suites()
              else load_suite(w) for w in what]
    if len(suites) == 1:
        return suites[0]
    entries = [e for s in suites for e in s.workloads]
    ids = [e.id for e in entries]
    if len(set(ids)) != len(ids):
        raise BadInput(f"workload ids repeat across {what}; run them separately")
    return Suite(name="+".join(s.name for s in suites), thresholds=suites[0].thresholds,
                 percentiles=suites[0].percentiles, workloads=entries)
