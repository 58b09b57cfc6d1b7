"""Scheduler-step traces: record every scheduler output of a bundled run, replay it on any
runner, and name the first step where the runner's outputs differ.

A live comparison says *that* V2 and V1 disagree; a step trace says *where*: both runners
receive the identical sequence of scheduler outputs (same batches, same block ids, same KV
hand-offs), so the first step whose sampled tokens differ from the recording is the step
that went wrong, and the request in it is the one whose state was wrong.

The JSONL holds one event per line, in the order they happened:
  {"event": "header", ...engine config, runner, faults, model, torch version}
  {"event": "step", "instance", "step", "sched": SchedulerOutput, "sampled": {req: [tok]}}
  {"event": "kv_send", "req_id", "block_ids", "num_tokens"}   PD: prefill side, at hand-off
  {"event": "kv_recv", "req_id", "block_ids"}                 PD: decode side, at admission
Spec decoding is not recorded: V2 keeps drafts on the device (-1 placeholders in the
scheduler output), so its step outputs cannot be replayed on a runner that needs them.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from mrbench.contract import BadInput
from mrbench.runner_impl import LLM, SamplingParams
from mrbench.runner_impl.engine.core import EngineCore
from mrbench.runner_impl.engine.kv_transfer import KVPayload, TensorCopyTransport
from mrbench.runner_impl.engine.outputs import CachedRequestData, NewRequestData, SchedulerOutput

FORMAT = "mrbench-steptrace/1"
ENGINE_KEYS = ("max_num_seqs", "max_num_batched_tokens", "block_size", "num_kv_blocks",
               "pd_disagg", "dtype", "seed")


# ---- (de)serialising scheduler outputs ---------------------------------------------------

def sched_to_json(s: SchedulerOutput) -> dict:
    return dict(
        new=[dict(asdict(r), sampling_params=asdict(r.sampling_params))
             for r in s.scheduled_new_reqs],
        cached=asdict(s.scheduled_cached_reqs),
        num_scheduled_tokens=s.num_scheduled_tokens,
        total=s.total_num_scheduled_tokens,
        spec=s.scheduled_spec_decode_tokens,
        finished=sorted(s.finished_req_ids), preempted=sorted(s.preempted_req_ids))


def sched_from_json(d: dict) -> SchedulerOutput:
    new = [NewRequestData(**{**r, "sampling_params": SamplingParams(**r["sampling_params"])})
           for r in d["new"]]
    return SchedulerOutput(new, CachedRequestData(**d["cached"]),
                           {k: int(v) for k, v in d["num_scheduled_tokens"].items()},
                           int(d["total"]), {k: list(v) for k, v in d["spec"].items()},
                           set(d["finished"]), set(d["preempted"]))


# ---- recording ---------------------------------------------------------------------------

class _RecordingTransport(TensorCopyTransport):
    def __init__(self, events: list[dict]) -> None:
        self.events = events

    def send(self, req_id, kv_caches, block_ids, num_tokens) -> KVPayload:
        self.events.append(dict(event="kv_send", req_id=req_id, block_ids=list(block_ids),
                                num_tokens=num_tokens))
        return super().send(req_id, kv_caches, block_ids, num_tokens)

    def recv(self, payload, kv_caches, block_ids) -> None:
        self.events.append(dict(event="kv_recv", req_id=payload.req_id,
                                block_ids=list(block_ids)))
        super().recv(payload, kv_caches, block_ids)


def record(prompts: list[str], max_tokens: int, stop: list[str], out: Path, *,
           runner: str = "v1", faults: tuple[str, ...] = (), model: str | None = None,
           **engine: Any) -> dict:
    """Run `prompts` greedily on one engine and write its step trace to `out` atomically."""
    events: list[dict] = []
    llm = LLM(model, runner=runner, faults=faults, transport=_RecordingTransport(events),
              **engine)
    cfg = llm.config
    if cfg.num_speculative_tokens:
        raise BadInput("step traces do not record speculative decoding (drafts live on the "
                       "device in V2); use num_speculative_tokens=0")

    def on_step(core, sched, out) -> None:
        events.append(dict(event="step", instance=core.name, step=len(core.step_records) - 1,
                           sched=sched_to_json(sched),
                           sampled=dict(zip(out.req_ids, out.sampled_token_ids))))
    llm.add_step_callback(on_step)
    llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens, stop=stop))
    header = dict(event="header", format=FORMAT, runner=runner, faults=list(faults),
                  model=str(llm.model_dir), torch=torch.__version__,
                  engine={k: _jsonable(getattr(cfg, k)) for k in ENGINE_KEYS},
                  num_kv_blocks=llm.cores[-1].allocator.num_blocks,
                  steps=sum(e["event"] == "step" for e in events))
    _write_jsonl(out, [header, *events])
    return header


def _jsonable(v: Any) -> Any:
    return v if isinstance(v, (int, float, str, bool, type(None))) else str(v)


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---- replaying ---------------------------------------------------------------------------

@dataclass
class Divergence:
    event_index: int          # line in the trace file, 1-based (the header is line 1)
    instance: str
    step: int
    req_id: str
    recorded: list[int]
    replayed: list[int]


@dataclass
class ReplayResult:
    runner: str
    faults: list[str]
    steps: int
    diverged_steps: int
    first: Divergence | None

    def to_dict(self) -> dict:
        return asdict(self)


def read_trace(path: Path) -> tuple[dict, Iterator[tuple[int, dict]]]:
    if not path.is_file():
        raise BadInput(f"step trace {path} does not exist")
    lines = path.read_text().splitlines()
    try:
        header = json.loads(lines[0]) if lines else None
    except json.JSONDecodeError as e:
        raise BadInput(f"step trace {path}:1: not JSON ({e.msg})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise BadInput(f"step trace {path}:1: not a {FORMAT} header")

    def events() -> Iterator[tuple[int, dict]]:
        for n, line in enumerate(lines[1:], 2):
            try:
                e = json.loads(line)
            except json.JSONDecodeError as err:
                raise BadInput(f"step trace {path}:{n}: not JSON ({err.msg})") from None
            if not isinstance(e, dict) or e.get("event") not in ("step", "kv_send", "kv_recv"):
                raise BadInput(f"step trace {path}:{n}: unknown event")
            yield n, e
    return header, events()


def replay(path: Path, runner: str, faults: tuple[str, ...] = (),
           model: str | None = None) -> ReplayResult:
    """Feed every recorded scheduler output to a fresh `runner`; compare sampled tokens."""
    header, events = read_trace(path)
    eng = dict(header["engine"], num_kv_blocks=header["num_kv_blocks"])
    # the same engine shape, warmed up the same way; only the runner (and faults) differ
    llm = LLM(model or header["model"], runner=runner, faults=faults, **eng)
    cores = {c.name: c for c in llm.cores}
    transport, payloads = TensorCopyTransport(), {}
    steps = diverged = 0
    first: Divergence | None = None
    for n, e in events:
        try:
            if e["event"] == "kv_send":
                payloads[e["req_id"]] = transport.send(e["req_id"], cores["prefill"].all_kv_caches(),
                                                       e["block_ids"], e["num_tokens"])
            elif e["event"] == "kv_recv":
                transport.recv(payloads.pop(e["req_id"]), cores["decode"].all_kv_caches(),
                               e["block_ids"])
            else:
                core: EngineCore = cores[e["instance"]]
                out = core.runner.execute_model(sched_from_json(e["sched"]))
                got = dict(zip(out.req_ids, out.sampled_token_ids))
                bad = [r for r, toks in e["sampled"].items() if got.get(r) != toks]
                steps += 1
                if bad:
                    diverged += 1
                    if first is None:
                        first = Divergence(n, e["instance"], e["step"], bad[0],
                                           e["sampled"][bad[0]], got.get(bad[0], []))
        except (KeyError, TypeError, ValueError) as err:
            raise BadInput(f"step trace {path}:{n}: malformed event ({type(err).__name__}: "
                           f"{err})") from None
    return ReplayResult(runner, list(faults), steps, diverged, first)
