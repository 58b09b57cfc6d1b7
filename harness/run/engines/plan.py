"""The engines a run needs, planned before the first one starts: which shapes, which sides,
which are resident together, what share of the device each gets, and which start at once.

Why: a vLLM engine start costs 30-120 s (imports, torch.compile, CUDA-graph capture), and starts one
after another were most of a `quick` run's time on a GPU (docs/performance.md, "Time to verdict on
the vllm target"). The engines of several workloads can start together and stay resident: their
imports,
compiles and captures overlap, and a campaign (`faults`, `calibrate`, `power`) keeps the
engines of a side that does not change from one run to the next.

What is measured stays clean: every engine of a start group has started before any workload
of that group runs, and no engine starts while a workload is measured. Engines of a group
that are not being measured sit idle between calls (their host waits on a pipe).

A group is the engines of consecutive engine shapes (in the run's order) that fit on the
device together. "Fit" is the target's own estimate of one instance's bytes (weights, the
smallest KV cache its shape needs, a fixed allowance for the process's context and CUDA
graphs; `Target.footprint`), against `gpu_memory_utilization` of the device's memory, and
each resident process also needs host memory. With one start at a time (the CPU default)
a group is one shape, as engines were always started.

Each GPU is its own budget. An engine's instances sit on the run's GPU, except a PD pair
placed across two (`--pd-gpus P,D`): its prefill instance on P, its decode instance on D.
A group fits when every GPU holds its own instances, each at an equal share of that GPU;
a pair across two GPUs takes the smaller of its two GPUs' shares on each.
"""
from __future__ import annotations

import math
import os
import shutil
import subprocess
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from mrbench.contract import EngineOptions

from ..engine_args import describe as describe_args
from ..targets.base import Footprint, SideSpec, engine_args_of

HOST_MEMORY_SHARE = 0.6              # of the host's RAM that resident engines may take
# One start a CPU, at most this many: all of `quick`'s 12 engines at once were ready sooner
# than 7 and then 5, fresh and warm (docs/performance.md, "Time to verdict on the vllm
# target"); more than 16 was never measured.
MAX_STARTS_AT_ONCE = 16


@dataclass(frozen=True)
class PlannedEngine:
    """One engine of the plan: a side's engine for one shape (a PD pair is one engine of
    two instances), and the workloads it serves, in run order."""

    side: str
    spec: SideSpec
    options: EngineOptions               # the shape, with its memory share set
    workloads: tuple[str, ...]
    footprint: Footprint | None          # what one instance needs at least; None: unknown
    gpus: tuple[int, ...] = (0,)         # the GPU of each instance (the harness's indices)

    @property
    def instances(self) -> int:
        """Engine instances (a PD pair: 2), one per entry of `gpus`."""
        return len(self.gpus)


@dataclass(frozen=True)
class StartGroup:
    """Engines resident together; all of them start before any of their workloads runs."""

    engines: tuple[PlannedEngine, ...]

    @property
    def instances(self) -> int:
        return sum(e.instances for e in self.engines)

    @property
    def workloads(self) -> list[str]:
        seen: dict[str, None] = {}
        for e in self.engines:
            seen.update(dict.fromkeys(e.workloads))
        return list(seen)


@dataclass(frozen=True)
class EnginePlan:
    groups: tuple[StartGroup, ...]
    starts_at_once: int
    device_bytes: int | None             # the device memory the shares are of
    budget_share: float                  # gpu_memory_utilization: what all groups' engines
                                         # together may take
    why_groups: str = ""                 # what bounded the group size
    _group_of: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for i, g in enumerate(self.groups):
            for w in g.workloads:
                self._group_of.setdefault(w, i)

    def group_of(self, workload: str) -> int:
        return self._group_of[workload]

    @property
    def engines(self) -> list[PlannedEngine]:
        return [e for g in self.groups for e in g.engines]

    def describe(self) -> str:
        """One line for the progress log, before anything starts."""
        n = len(self.engines)
        inst = sum(e.instances for e in self.engines)
        return (f"engine plan: {n} engine{'s' * (n != 1)}"
                + (f" ({inst} instances)" if inst != n else "")
                + f" in {len(self.groups)} start group{'s' * (len(self.groups) != 1)}, up to "
                f"{self.starts_at_once} starting at once"
                + (f" ({self.why_groups})" if self.why_groups else "")
                + "".join(f"; each PD pair's prefill on GPU {g[0]}, its decode on GPU {g[1]}"
                          for g in sorted({e.gpus for e in self.engines
                                           if len(set(e.gpus)) > 1}))
                + (f"; engine shape differs by engine_args: {note}"
                   if (note := self.engine_args_note()) else ""))

    def engine_args_note(self) -> str:
        """Which engines the user's engine arguments shape: each distinct set, with its
        sides and, where it is not every workload's, its workloads ("" where none)."""
        every = {w for e in self.engines for w in e.workloads}
        where: dict[str, tuple[dict[str, None], dict[str, None]]] = {}
        for e in self.engines:
            args = engine_args_of(e.spec, e.options)
            if args:
                sides, wls = where.setdefault(describe_args(args), ({}, {}))
                sides[e.side] = None
                wls.update(dict.fromkeys(e.workloads))
        return "; ".join(
            f"{k} ({', '.join(sides)}" + (f": {', '.join(wls)}" if set(wls) != every else "")
            + ")" for k, (sides, wls) in where.items())

    def to_dict(self) -> dict:
        """The plan as the manifest records it."""
        return dict(starts_at_once=self.starts_at_once, device_bytes=self.device_bytes,
                    budget_share=self.budget_share, why_groups=self.why_groups,
                    groups=[[dict(side=e.side, workloads=list(e.workloads),
                                  instances=e.instances,
                                  engine_args=dict(engine_args_of(e.spec, e.options)),
                                  footprint=None if e.footprint is None
                                  else dict(device=e.footprint.device, host=e.footprint.host),
                                  gpus=list(e.gpus),
                                  gpu_memory_share=e.options.gpu_memory_share)
                             for e in g.engines] for g in self.groups])


def default_starts_at_once(devices: set[str], cpus: int | None = None) -> int:
    """How many engines start together when the user did not say: on a GPU, one per CPU
    the harness may use, at most MAX_STARTS_AT_ONCE (overlapped starts were measured to gain
    well past one per two CPUs: above); on CPU one, where the engines' own compute shares
    the few cores and a start overlapped with another's was not measured to gain."""
    if not any(d.startswith("cuda") for d in devices):
        return 1
    n = cpus if cpus is not None else len(os.sched_getaffinity(0))
    return max(1, min(MAX_STARTS_AT_ONCE, n))


def device_memory_bytes(device: str) -> int | None:
    """The device's memory in bytes, asked of nvidia-smi (so that the harness's own process
    creates no CUDA context); None where it cannot say (no GPU, no nvidia-smi)."""
    if not device.startswith("cuda"):
        return None
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    index = device.partition(":")[2] or "0"
    try:
        out = subprocess.run([exe, "--query-gpu=memory.total", "--format=csv,noheader,nounits",
                              "-i", index], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    try:
        return int(float(out.stdout.strip().splitlines()[0])) << 20     # MiB
    except (ValueError, IndexError):
        return None


def host_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def _per_gpu(engines: list[tuple[tuple[int, ...], Footprint | None]]) -> dict[int, int]:
    """{GPU: instances on it} of engines [(the GPU of each instance, footprint)]."""
    n: dict[int, int] = {}
    for gpus, _ in engines:
        for g in gpus:
            n[g] = n.get(g, 0) + 1
    return n


def _fits(engines: list[tuple[tuple[int, ...], Footprint | None]], budget: int | None,
          host: int | None) -> bool:
    """Whether engines [(the GPU of each instance, footprint)] fit together: on each GPU,
    each of its instances gets an equal share of `budget` (what the GPU may give), which
    must hold its device bytes; and their processes must fit the host's memory
    (HOST_MEMORY_SHARE of it)."""
    if budget is None or any(f is None for _, f in engines):
        return False
    if host is not None and sum(len(g) * f.host for g, f in engines) > host * HOST_MEMORY_SHARE:
        return False
    n = _per_gpu(engines)
    return all(f.device <= budget / n[g] for gpus, f in engines for g in gpus)


def _down(share: float) -> float:
    """A share to 4 places, rounded down: the shares of one GPU never sum past its budget."""
    return math.floor(share * 1e4 + 1e-9) / 1e4


def plan(workloads: list[tuple[str, EngineOptions]], sides: dict[str, SideSpec],
         key_of: Callable[[SideSpec, EngineOptions], Any],
         footprint_of: Callable[[SideSpec, EngineOptions], Footprint | None],
         budget_share: float, starts_at_once: int, device_bytes: int | None,
         host_bytes: int | None = None, pd_gpus: tuple[int, int] | None = None
         ) -> EnginePlan:
    """The plan for `workloads` [(id, engine options)] in run order on `sides`.

    Shapes (equal engine keys on every side) are grouped in order of first use while the
    group fits (`_fits`); with one start at a time, or where a footprint or the device's
    memory is unknown, each shape is its own group (resident alone, as before planning).
    `pd_gpus` (P, D): a PD pair's prefill instance on GPU P and its decode instance on D;
    every other instance on GPU 0, `device_bytes` being each GPU's memory. Each engine's
    `gpu_memory_share` is what the target gives the engine: on one GPU, budget_share times
    its instances over that GPU's (the target splits a pair's between its two engines);
    across two, the smaller of its GPUs' per-instance shares, which each engine takes."""
    shapes: dict[tuple, list[str]] = {}
    shape_opts: dict[tuple, EngineOptions] = {}
    for wid, options in workloads:
        keys = tuple(key_of(sp, options) for _, sp in sorted(sides.items()))
        shapes.setdefault(keys, []).append(wid)
        shape_opts.setdefault(keys, options)
    order = list(shapes)

    def gpus_of(o: EngineOptions) -> tuple[int, ...]:
        if not o.pd_disagg:
            return (0,)
        return pd_gpus if pd_gpus else (0, 0)

    def engines_of(keys: tuple) -> list[tuple[tuple[int, ...], Footprint | None]]:
        o = shape_opts[keys]
        return [(gpus_of(o), footprint_of(sp, o)) for sp in sides.values()]

    groups: list[list[tuple]] = []
    why = ""
    if starts_at_once <= 1:
        groups = [[k] for k in order]
        why = "one start at a time: each shape resident alone"
    else:
        budget = None if device_bytes is None else int(device_bytes * budget_share)
        for keys in order:
            if groups and _fits([e for k in groups[-1] + [keys] for e in engines_of(k)],
                                budget, host_bytes):
                groups[-1].append(keys)
            else:
                groups.append([keys])
        if len(groups) > 1:
            unknown = budget is None or any(f is None for k in order for _, f in engines_of(k))
            why = ("a footprint or the device's memory is unknown: each shape resident alone"
                   if unknown else "grouped by what fits the device and the host together")
    out = []
    for g in groups:
        on = _per_gpu([e for k in g for e in engines_of(k)])
        engines = []
        for keys in g:
            o = shape_opts[keys]
            gpus = gpus_of(o)
            if len(set(gpus)) == 1:        # every instance on one GPU: the engine's whole share
                share = budget_share * len(gpus) / on[gpus[0]]
            else:                          # across GPUs: what each instance may take on each
                share = min(budget_share / on[x] for x in gpus)
            for side, sp in sides.items():
                engines.append(PlannedEngine(
                    side=side, spec=sp, workloads=tuple(shapes[keys]),
                    options=replace(o, gpu_memory_share=_down(share)),
                    footprint=footprint_of(sp, o), gpus=gpus))
        out.append(StartGroup(tuple(engines)))
    return EnginePlan(tuple(out), max(1, starts_at_once), device_bytes, budget_share, why)
