"""The model runner of every rank, measured in its own worker process.

With `tensor_parallel_size` > 1, vLLM runs one model runner per rank, each in a worker
process of its own (its multiprocessing executor), so the engine's process holds no runner
to label, profile or audit. The same holds for one rank under
`distributed_executor_backend=mp`, which a PD pair uses to give each engine's runner its own
process. A per-step sync or an extra op that only one rank's runner
makes (a rank-dependent branch, a collective that waits) would go unseen if only the engine
process were measured. So the harness sends its measurement to the ranks through vLLM's own
RPC to its workers (`LLM.collective_rpc`, which runs a function with the worker as its first
argument, in every rank): each rank puts the harness's phase ranges on its runner, cuts its
steps by its own `execute_model` ... `sample_tokens` calls and times them (the engine
process's step call only hands a batch over), profiles its part of the profiled pass and
counts it there (the raw events stay in the worker), and reads V2's host mirror against its
device truth for the state audit. The checks then judge every rank
(`checks/compare.py`), and a rank that measured nothing is "not measured".

The functions below whose first parameter is `worker` run in the rank's process; vLLM
pickles them by reference, so this module must import there (the worker runs the engine's
interpreter and path). `Ranks` is their caller in the engine process.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ....measure import phases
from ....measure.profiler import count_per_step, start_profile, stop_profile

_STATE = "_mrbench_rank"                  # the rank's own measurement state, on its worker


def _inner(worker: Any) -> Any:
    """The worker itself: collective_rpc passes the wrapper that delegates to it."""
    return getattr(worker, "worker", worker)


@dataclass
class _RankState:
    prof: Any = None                     # the started profiler of the profiled pass
    step: Any = None                     # the open step range (record_function), or None
    scheduled: list[bool] = field(default_factory=list)   # per step cut: it had tokens
    # the open step on this rank (perf_counter, the host's monotonic clock, which every
    # process of the machine reads alike): its start, whether it had tokens, the end of
    # its last call so far
    t_open: float = 0.0
    open_scheduled: bool = False
    t_last: float = 0.0
    ruler_ms: float | None = None        # the slow-step ruler's spin in the open step
    # (start, end, ruler ms, KV connector seconds) of each step with tokens since the
    # session last took them
    times: list[tuple[float, float, float | None, float]] = field(default_factory=list)
    ruler: Any = None                    # ruler.StepRuler where the side has one


def _open_step(state: _RankState, scheduler_output: Any) -> None:
    import torch
    _close_step(state)                   # a step that never reached sample_tokens
    state.t_open = state.t_last = time.perf_counter()
    state.ruler_ms = None
    state.step = torch.profiler.record_function(phases.STEP_LABEL)
    state.step.__enter__()
    # vLLM calls execute_model also when nothing is scheduled (a KV connector's step
    # without a forward, an idle engine); the session counts only steps with tokens
    n = getattr(scheduler_output, "total_num_scheduled_tokens", None)
    state.open_scheduled = n is None or n > 0
    state.scheduled.append(state.open_scheduled)


def _transfer_s() -> float:
    """The worker-side KV connector's seconds since the last take (0 where this process
    runs no connector: vLLM imports a measuring connector, and so `kv_timing`, only for a
    PD engine)."""
    mod = sys.modules.get(f"{__package__}.kv_timing")
    return mod.take() if mod is not None else 0.0


def kv_transfers_on_rank(worker: Any) -> list[dict[str, Any]]:
    """In the rank: the NIXL connector's per-request transfer records since the last take
    (kv_nixl.take_transfers; none where the rank runs another connector)."""
    mod = sys.modules.get(f"{__package__}.kv_nixl")
    return mod.take_transfers() if mod is not None else []


def _close_step(state: _RankState) -> None:
    if state.step is not None:
        state.step.__exit__(None, None, None)
        state.step = None
        moved_s = _transfer_s()          # a step without tokens moves no request's KV
        if state.open_scheduled:
            state.times.append((state.t_open, state.t_last, state.ruler_ms, moved_s))


def _end_call(state: _RankState, last: bool) -> None:
    """A call of the open step returned; after its last one (`sample_tokens`) the ruler,
    where the side has one, spins for its share of a step that had tokens."""
    if last and state.ruler is not None and state.open_scheduled:
        # the device spin is one launch: not while the profiled pass counts them
        state.ruler_ms = state.ruler.spin_after(state.t_open, on_device=state.prof is None)
    state.t_last = time.perf_counter()


def _cut_steps(w: Any, state: _RankState) -> None:
    """One step range per engine step on this rank: from the start of `execute_model` to
    the end of `sample_tokens` (vLLM calls both on every rank, in that order; a step whose
    `execute_model` returned its output ends at the next step's start)."""
    run, sample = w.execute_model, getattr(w, "sample_tokens", None)

    def execute_model(*a: Any, **kw: Any) -> Any:
        _open_step(state, a[0] if a else kw.get("scheduler_output"))
        try:
            return run(*a, **kw)
        finally:
            _end_call(state, last=sample is None)
    w.execute_model = execute_model
    if sample is not None:
        def sample_tokens(*a: Any, **kw: Any) -> Any:
            try:
                return sample(*a, **kw)
            finally:
                _end_call(state, last=True)
                _close_step(state)
        w.sample_tokens = sample_tokens


def install_on_rank(worker: Any, runner: str, faults: tuple[str, ...],
                    ruler_pct: float | None = None) -> dict[str, Any]:
    """In the rank: apply the side's vLLM faults where the process did not inherit them (a
    spawned worker), label the runner's phases, cut and time steps, and put the slow-step
    ruler where the step is timed; what it attached, and where."""
    from .faults import apply as apply_faults
    from .ruler import StepRuler
    w = _inner(worker)
    applied = apply_faults(faults) if faults else []
    probe = phases.install(w.model_runner, phases.VLLM_V2 if runner == "v2" else phases.VLLM_V1)
    import torch
    state = _RankState(ruler=StepRuler(
        ruler_pct, "cuda" if torch.cuda.is_available() else "cpu") if ruler_pct else None)
    setattr(w, _STATE, state)
    _cut_steps(w, state)
    r = w.model_runner
    return dict(rank=int(getattr(w, "rank", 0)), pid=os.getpid(),
                # where the worker runs: its device as it sees it, and the GPUs it was given
                device=str(getattr(w, "device", "") or "") or None,
                cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
                runner_class=f"{type(r).__module__}.{type(r).__qualname__}",
                attached=probe.attached, missing=probe.missing,
                faults_applied=[a["function"] for a in applied])


def start_on_rank(worker: Any, device: str) -> None:
    state: _RankState = getattr(_inner(worker), _STATE)
    state.scheduled = []
    state.prof = start_profile(device)


def stop_on_rank(worker: Any, device: str, phase_labels: dict[str, str]) -> list[dict]:
    """End the rank's profiled pass; its per-step counts (profiler.count_per_step) of the
    steps that had tokens to run, the steps the session records."""
    state: _RankState = getattr(_inner(worker), _STATE)
    _close_step(state)
    events = stop_profile(state.prof)
    state.prof = None
    rows = count_per_step(events, phases.STEP_LABEL, phase_labels, device)
    if len(rows) != len(state.scheduled):       # a step cut outside the profiler's window
        return rows
    kept = [row for row, ran in zip(rows, state.scheduled) if ran]
    for i, row in enumerate(kept):
        row["step"] = i
    return kept


def take_times_on_rank(worker: Any) -> list[tuple[float, float, float | None, float]]:
    """The (start, end, ruler ms or None, KV connector seconds) of each step with tokens
    this rank ran since the last take."""
    state: _RankState = getattr(_inner(worker), _STATE)
    out, state.times = state.times, []
    return out


def audit_on_rank(worker: Any) -> tuple[int, int] | None:
    """V2's host mirror of num_computed_tokens against its device truth, for the rank's
    live requests: (max, min) of mirror - truth, or None where the runner keeps no
    per-request state (V1) or holds no request."""
    states = getattr(_inner(worker).model_runner, "req_states", None)
    if states is None or not getattr(states, "req_id_to_index", None):
        return None
    slots = list(states.req_id_to_index.values())
    truth = states.num_computed_tokens.gpu[slots].cpu().numpy()
    slack = states.num_computed_tokens_np[slots] - truth
    return int(slack.max()), int(slack.min())


def backends_on_rank(worker: Any) -> list[str]:
    """The attention backends the rank's runner built (its attention groups)."""
    names: list[str] = []
    for groups in getattr(_inner(worker).model_runner, "attn_groups", None) or []:
        for g in groups:
            n = g.backend.get_name()
            if n not in names:
                names.append(n)
    return names


@dataclass
class RankProfile:
    """The profiled pass of every rank of every engine: per (engine instance, rank), the
    per-step counts that rank made."""

    sources: list[tuple[str, int, list[dict]]] = field(default_factory=list)
    ranked: bool = False                 # some engine has more than one rank

    def table(self) -> list[dict]:
        """One profile table: every source's rows, marked with their rank where an engine
        runs more than one (a rank column on a one-rank engine would make its counts
        incomparable with a side whose runner ran in its engine's process)."""
        return [dict(row, rank=rank) if self.ranked else dict(row)
                for _, rank, rows in self.sources for row in rows]


class Ranks:
    """The engine process's handle on the ranks of its engines (each an `LLM` whose runners
    run in vLLM's multiprocessing workers), keyed by engine instance."""

    def __init__(self, llms: dict[str, Any], runner: str, faults: tuple[str, ...],
                 ruler_pct: float | None = None) -> None:
        self.llms = llms
        self.info: dict[str, list[dict[str, Any]]] = {
            name: llm.collective_rpc(install_on_rank, args=(runner, faults, ruler_pct))
            for name, llm in llms.items()}

    @property
    def ranked(self) -> bool:
        return any(len(i) > 1 for i in self.info.values())

    def size(self, instance: str) -> int:
        return len(self.info[instance])

    def _name(self, instance: str, rank: int) -> str:
        return f"{instance}/rank{rank}" if self.ranked else instance

    @contextmanager
    def profiling(self, device: str, phase_labels: dict[str, str]) -> Iterator[RankProfile]:
        """Every rank profiles what runs inside the block; the counts come back on exit."""
        out = RankProfile(ranked=self.ranked)
        for llm in self.llms.values():
            llm.collective_rpc(start_on_rank, args=(device,))
        try:
            yield out
        finally:
            for name, llm in self.llms.items():
                rows = llm.collective_rpc(stop_on_rank, args=(device, phase_labels))
                out.sources += [(name, rank, r) for rank, r in enumerate(rows)]

    def audit(self, instance: str) -> list[tuple[str, int, int]]:
        """(rank's name, max, min) of mirror - truth on each rank of the engine that holds
        requests (harness.run.targets.vllm.engine.VllmEngine.audit says what is read)."""
        got = self.llms[instance].collective_rpc(audit_on_rank)
        return [(self._name(instance, r), hi, lo) for r, g in enumerate(got)
                if g is not None for hi, lo in [g]]

    def step_times(self, instance: str) -> list[list[tuple[float, float, float | None, float]]]:
        """Per rank of the engine, the (start, end, ruler ms, KV connector seconds) of each
        step with tokens since the last call: from its `execute_model` to the end of its
        `sample_tokens`."""
        return self.llms[instance].collective_rpc(take_times_on_rank)

    def kv_transfers(self, instance: str) -> list[list[dict[str, Any]]]:
        """Per rank of the engine, the KV transfer records its NIXL connector took since
        the last call (kv_nixl.py)."""
        return self.llms[instance].collective_rpc(kv_transfers_on_rank)

    def attention_backends(self, instance: str) -> list[str]:
        return self.llms[instance].collective_rpc(backends_on_rank)[0]

    def phase_probe(self, instance: str) -> dict[str, Any]:
        """What the phases attached to, as one runner's probe says it: a path counts as
        missing when it did not attach on some rank."""
        info = self.info[instance]
        attached = {ph: paths for ph, paths in info[0]["attached"].items()}
        missing = sorted({m for i in info for m in i["missing"]})
        return dict(attached=attached, missing=missing)

    def runner_class(self, instance: str) -> str:
        return self.info[instance][0]["runner_class"]

    def resolved(self, instance: str) -> dict[str, Any]:
        """For the manifest: each rank's process, runner and what its phases attached to."""
        return dict(size=len(self.info[instance]), ranks=[dict(i) for i in self.info[instance]])
