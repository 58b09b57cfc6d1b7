"""The run record's types, in one place: the verdicts, a check, and the two files of a run
that say what it judged and how it ran (summary.json's `RunSummary`, manifest.json's
`Manifest`).

Why one home: the verdicts were bare strings spelt out wherever they were made or read
(the gate, the history, the reports, the campaign, the scripts), and summary.json was a
dict built in four places and read by string keys in a dozen, so a typo in one of them
was a check that silently never matched. Here each value and each field is written once;
everything else names the member or the attribute. pydantic v2 models validate what is
read back; docs/schema/ publishes their JSON Schema (record/schemas.py).

Why StrEnum: a member *is* its JSON string. `json.dumps(Verdict.REGRESSION)` writes the
member's value, so the files come out as they did; and a verdict read back from a run (a
plain str, older runs included) compares equal to its member. Nothing here imports the
rest of the harness: every layer can use these types (results.py is their one writer and
reader).
"""
from __future__ import annotations

import enum
import math
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_serializer,
)

from .errors import EXIT_PASS, EXIT_REGRESSION, EXIT_RUN_FAILED
from .metrics import current_figures, current_name


class Verdict(enum.StrEnum):
    """One check's verdict. PASS and REGRESSION are judgements; INFO is a figure reported
    but not gated (or not measurable, with the reason in its note); ERROR is a check that
    could not measure what it gates, which makes the whole run an error, never a pass."""

    PASS = "pass"
    REGRESSION = "regression"
    INFO = "info"
    ERROR = "error"


class RunVerdict(enum.StrEnum):
    """One run's verdict (summary.json's "verdict"). ERROR covers a failed side, a check in
    error and an interrupted run alike: an interrupted run is an error (it cannot pass),
    and what the interrupt left undone is recorded beside it under "interrupted", not as a
    verdict of its own. IMPORTED is a run made by `mrbench import-bench`: no gate ran."""

    PASS = "pass"
    REGRESSION = "regression"
    ERROR = "error"
    IMPORTED = "imported"


class DeltaKind(enum.StrEnum):
    """What a check's `delta` is, so that a reader need not guess it from the three numbers
    (a report drew a CI band only where it recognised the form). Set by the code that
    computes the delta; a check whose delta is None where it cannot be computed keeps the
    kind it has where it can. UNKNOWN: read from a run written before the field (results
    format 1)."""

    RELATIVE = "relative"        # candidate / baseline - 1 (an estimate of it, for a test)
    DIFFERENCE = "difference"    # candidate - baseline
    RATIO = "ratio"              # candidate / baseline
    NONE = "none"                # the check computes no change
    UNKNOWN = "unknown"


class BarKind(enum.StrEnum):
    """Which way a check's bar binds. Where the bar has `alpha`, the figure must also be
    beyond the bound significantly at that level (a p-value, or the CI's far end)."""

    MAX_RELATIVE_INCREASE = "max_relative_increase"   # regression: relative change > value
    MAX_RELATIVE_DECREASE = "max_relative_decrease"   # regression: relative change < -value
    MAX_INCREASE = "max_increase"        # regression: candidate - baseline > value
    MAX_DECREASE = "max_decrease"        # regression: candidate - baseline < -value
    MAX_VALUE = "max_value"              # regression: candidate > value
    MIN_VALUE = "min_value"              # regression: candidate < value
    SIGNIFICANCE = "significance"        # regression: p < alpha, whatever the size
    NONE = "none"                        # not gated


def _finite(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None


def json_safe(x: Any) -> Any:
    """JSON-safe: NaN/inf -> None (JSON has no NaN), tuples -> lists, keys -> str, an enum
    member -> its value."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, enum.Enum):
        return x.value
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


class _Record(BaseModel):
    """A part of a run's record. `omit_none` names the fields left out of the JSON while
    they are None ("all": every field), so a file holds what its writer set: a summary has
    "interrupted" only when the run was, and the tests and tools that ask `"interrupted"
    in summary` read it as before."""

    omit_none: ClassVar[frozenset[str] | Literal["all"]] = frozenset()

    @model_serializer(mode="wrap")
    def _leave_out_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        omit = self.omit_none
        return {k: v for k, v in out.items()
                if v is not None or (omit != "all" and k not in omit)}

    def to_json_dict(self) -> dict[str, Any]:
        """The record as its JSON file holds it (plain dicts, lists and strings)."""
        return json_safe(self.model_dump())


class Bar(_Record):
    """The bar a check was held to, as numbers: its kind, its bound (`value`, relative for
    the relative kinds), the significance level it also needs (`alpha`), and any further
    bound the verdict used (`also`: a sync budget, the allocations' own increase). The
    human text stays the check's `threshold`."""

    model_config = ConfigDict(frozen=True)
    omit_none = frozenset({"alpha"})

    kind: BarKind
    value: float | None = None
    alpha: float | None = None
    also: dict[str, float] = {}


NOT_GATED = Bar(kind=BarKind.NONE)
_POSITIONAL = ("workload", "metric", "unit", "baseline", "candidate", "delta", "ci",
               "p_value", "threshold", "method", "verdict", "note")


class Check(_Record):
    """One gated (or reported) metric of one workload: both sides' figures, the change
    (`delta`, of `delta_kind`), its CI and p-value, the bar it was held to (`threshold` in
    words, `bar` in numbers), the method, and the verdict, with a note that says why where
    the verdict alone does not. A non-finite figure is written as null.

    The first twelve fields may be given by position, in the order of the JSON (the order
    the check families have always written them in). Fields a format-1 check lacks read as
    UNKNOWN / None."""

    workload: str
    metric: str
    unit: str = ""
    baseline: float | None = None
    candidate: float | None = None
    delta: float | None = None
    ci: list[float | None] | None = None
    p_value: float | None = None
    threshold: str = ""
    method: str = ""
    verdict: Verdict
    note: str = ""
    delta_kind: DeltaKind = DeltaKind.UNKNOWN
    bar: Bar | None = None
    # a latency check over engine pairs: each pair's [log ratio, standard error], which
    # `mrbench calibrate` reads to measure the spread between pairs (checks/latency.py)
    pairs: list[list[float]] | None = None

    def __init__(self, *args: Any, **fields: Any) -> None:
        if len(args) > len(_POSITIONAL):
            raise TypeError(f"Check takes at most {len(_POSITIONAL)} positional fields")
        super().__init__(**dict(zip(_POSITIONAL, args)), **fields)

    @field_validator("metric")
    @classmethod
    def _current_metric(cls, name: str) -> str:
        """A check of a run written before results format 3 (p99_e2e_ms) reads under
        vLLM's name (p99_e2el_ms): metrics.current_name."""
        return current_name(name)

    @field_serializer("baseline", "candidate", "delta", "p_value")
    def _finite_figure(self, x: float | None) -> float | None:
        return _finite(x)

    @field_serializer("ci")
    def _finite_ci(self, ci: list[float | None] | None) -> list[float | None] | None:
        return None if ci is None else [_finite(x) for x in ci]

    def to_dict(self) -> dict[str, Any]:
        """The check as summary.json holds it."""
        return self.to_json_dict()


# The note a latency check opens with when the run reports it and only the history judges
# it (`--history`): the two sides run runners that differ by design (vLLM's V2 against V1).
ACROSS_RUNS = "judged across runs, not within one"


def judged_across_runs(verdict: Any, note: Any) -> bool:
    """A reported latency check whose estimate the history gate still judges."""
    return verdict == Verdict.INFO and isinstance(note, str) and note.startswith(ACROSS_RUNS)


def overall_verdict(checks: list[Check], failures: list) -> tuple[RunVerdict, int]:
    """A run's verdict and exit code from its checks and failed sides. A failed side, or a
    check that could not measure what it gates ("not measured"), is an error (exit 3):
    never a pass. So is a run that judged nothing at all (every workload unsupported here):
    it measured nothing, and a pass would say it had."""
    if failures or not checks or any(c.verdict == Verdict.ERROR for c in checks):
        return RunVerdict.ERROR, EXIT_RUN_FAILED
    if any(c.verdict == Verdict.REGRESSION for c in checks):
        return RunVerdict.REGRESSION, EXIT_REGRESSION
    return RunVerdict.PASS, EXIT_PASS


class Failure(_Record):
    """A side that failed on a workload: its error, the traceback where one was caught, and
    its engine's log (a path inside the run directory) where there was one."""

    omit_none = frozenset({"traceback", "engine_log"})

    workload: str
    side: str
    error: str
    traceback: str | None = None
    engine_log: str | None = None


class Unsupported(_Record):
    """A workload a side's target cannot run on this machine: not a failure, not judged."""

    workload: str
    side: str
    target: str
    reason: str


class Interruption(_Record):
    """What a SIGINT or SIGTERM left undone: the workload it stopped (a failure of both
    sides), the ones that finished (judged), the ones never started."""

    during: str | None = None
    finished: list[str] = []
    not_run: list[str] = []


class ImportedRun(_Record):
    """summary.json's account of an imported vllm bench run (`mrbench import-bench`)."""

    kind: str
    files: list[str] = []
    per_request: str = ""
    requests: int = 0
    itl_gaps: int = 0
    notes: list[str] = []


EXIT_OF = {RunVerdict.ERROR: EXIT_RUN_FAILED, RunVerdict.REGRESSION: EXIT_REGRESSION}


class RunSummary(_Record):
    """summary.json: what a run judged. Written by `mrbench run` (orchestrate), `mrbench
    compare` (regate) and `mrbench import-bench`, each through `build`; `metrics` holds each
    workload's per-side figures (latency_summary's, keyed by vLLM's names), whose shape the
    checks layer owns."""

    omit_none = frozenset({"wall_s", "interrupted", "imported", "waves"})

    verdict: RunVerdict
    suite: str | None = None
    target: str | None = None
    baseline: str | None = None
    candidate: str | None = None
    candidate_faults: list[str] = []
    checks: list[Check]
    failures: list[Failure] = []
    unsupported: list[Unsupported] = []
    metrics: dict[str, dict[str, dict[str, Any]]] = {}
    wall_s: float | None = None
    interrupted: Interruption | None = None
    imported: ImportedRun | None = None
    waves: int | None = None          # re-judged on its first N waves (regate.first_waves)

    @field_validator("metrics")
    @classmethod
    def _current_figure_names(cls, metrics: dict[str, dict[str, dict[str, Any]]]
                              ) -> dict[str, dict[str, dict[str, Any]]]:
        """The figures of an older run read under vLLM's names and units: before results
        format 3 mean_e2e_ms and output_tokens, before format 4 mrbench's own spec-decode
        names with the acceptance rate a fraction (metrics.current_figures)."""
        return {wl: {side: current_figures(figures) for side, figures in sides.items()}
                for wl, sides in metrics.items()}

    @classmethod
    def build(cls, checks: list[Check | dict], failures: list[Failure | dict] = (), *,
              imported: ImportedRun | dict | None = None, **fields: Any) -> RunSummary:
        """The one way a summary is made: its verdict is the gate's on the checks and the
        failed sides (overall_verdict), or IMPORTED for an import, where no gate ran. A
        check may be given in its JSON form."""
        checks = [Check.model_validate(c) for c in checks]
        verdict = (RunVerdict.IMPORTED if imported is not None
                   else overall_verdict(checks, list(failures))[0])
        return cls.model_validate(dict(fields, verdict=verdict, checks=checks,
                                       failures=list(failures), imported=imported))

    def rejudged(self, checks: list[Check], **changes: Any) -> RunSummary:
        """This summary with other checks, its verdict judged anew (`build`)."""
        keep = {k: getattr(self, k) for k in type(self).model_fields
                if k not in ("verdict", "checks", "failures")}
        return RunSummary.build(checks, self.failures, **dict(keep, **changes))

    @property
    def exit_code(self) -> int:
        """The exit code `mrbench run` gives for this verdict (errors.py)."""
        return EXIT_OF.get(self.verdict, EXIT_PASS)


class Environment(_Record):
    """Where a run ran (results.environment): Python and package versions, the git commit,
    the machine (`device`, whose shape the measure layer owns), the command line, the time,
    and where its data came from."""

    omit_none = "all"

    python: str | None = None
    versions: dict[str, str | None] | None = None
    git_sha: str | None = None
    git_dirty: bool | None = None
    device: dict[str, Any] | None = None
    argv: list[str] | None = None
    created: str | None = None
    data: dict[str, Any] | None = None


class Compared(_Record):
    """The two runs a `mrbench compare` gated, and which side of each."""

    base: str
    cand: str
    side: str


class Manifest(Environment):
    """manifest.json: how a run ran. The top level is typed; the nested parts whose shape
    another module owns stay free-form (the suite: record/suite.py; isolation, sides,
    builds, engines and each side's resolved settings: the run layer and its targets; the
    workloads' parameters: each workload). `results_format` is stamped by the writer; a
    manifest without it is format 1.

    extra="allow" because a manifest is read back to be written again: a compare embeds
    the manifests of the two runs it gated whole (`base_manifest`, `cand_manifest`), and a
    run written by an older mrbench carries top-level keys this model no longer names (or
    a newer one of the same format adds some); dropping them on the way through would
    lose the record of how those runs ran."""

    model_config = ConfigDict(extra="allow")

    results_format: int = 1
    suite: dict[str, Any] | None = None
    target: str | None = None
    isolation: dict[str, Any] | None = None
    sides: dict[str, dict[str, Any]] | None = None
    builds: dict[str, Any] | None = None
    # each side's model: its folder, and for a made model its preset, shape, parameters and
    # that its weights are random (run/models.describe)
    models: dict[str, Any] | None = None
    seeds: dict[str, Any] | None = None
    workloads: dict[str, dict[str, Any]] = {}
    engines: dict[str, Any] | None = None
    resolved: dict[str, dict[str, dict[str, Any]]] = {}
    # the percentiles of the summary's pNN_ figures (the suite's or --percentiles); None:
    # a run before results format 4, whose figures have P90 and P99 (metrics.PERCENTILES)
    percentiles: list[float] | None = None
    imported: dict[str, Any] | None = None        # an import's sources (import-bench)
    importer: Environment | None = None           # where the import was made
    compared: Compared | None = None
    base_manifest: Manifest | None = None
    cand_manifest: Manifest | None = None

    def resolved_side(self, workload: str, side: str) -> dict[str, Any]:
        """What `side` resolved for `workload` (empty when the run did not record it)."""
        return (self.resolved.get(workload) or {}).get(side) or {}

