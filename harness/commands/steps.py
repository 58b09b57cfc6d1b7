"""`mrbench steps`: record a scheduler-step trace, or replay one on a runner and name the
first divergent step."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from mrbench.contract import BadInput
from mrbench.workloads import HELD_OUT_SEEDS, STOP, gsm8k_prompts

from ..run.targets.bundled import steptrace
from ..record.errors import EXIT_PASS, EXIT_REGRESSION
from ..run.targets.bundled.runner_parts import KNOWN_FAULTS, RunnerError


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`mrbench steps` and its subcommands (record, replay)."""
    st = sub.add_parser("steps", help="record a scheduler-step trace, or replay one on a runner")
    ssub = st.add_subparsers(dest="steps_cmd", required=True, parser_class=type(st))
    rec = ssub.add_parser("record", help="run GSM8K prompts on one runner, write the step trace")
    rec.add_argument("--out", type=Path, required=True, help="trace file (JSONL)")
    rec.add_argument("--runner", default="v1")
    rec.add_argument("--mode", choices=["pd", "colocated"], default="pd")
    rec.add_argument("--limit", type=int, default=16)
    rec.add_argument("--seed", type=int, default=None, help="problem-generator seed")
    rec.add_argument("--max-num-seqs", type=int, default=4)
    rec.add_argument("--model")
    rep = ssub.add_parser("replay", help="feed a step trace to a runner; first divergent step")
    rep.add_argument("trace", type=Path)
    rep.add_argument("--runner", default="v2")
    rep.add_argument("--fault", action="append", default=[], metavar="NAME")
    rep.add_argument("--model")
    rep.add_argument("--json", action="store_true")
    return st


def _check_runner(runner: str) -> None:
    if runner not in ("v1", "v2"):
        raise BadInput(f"--runner must be v1 or v2, got {runner!r}")


def record(a: argparse.Namespace) -> int:
    if a.limit < 1 or a.max_num_seqs < 1:
        raise BadInput("--limit and --max-num-seqs must be >= 1")
    _check_runner(a.runner)
    prompts = gsm8k_prompts(HELD_OUT_SEEDS[3] if a.seed is None else a.seed, a.limit)
    try:
        h = steptrace.record(prompts, 320, list(STOP), a.out, runner=a.runner,
                             model=a.model, pd_disagg=a.mode == "pd",
                             max_num_seqs=a.max_num_seqs)
    except RunnerError as e:
        raise BadInput(str(e)) from None
    print(f"recorded {h['steps']} steps of {a.runner} ({a.mode}) to {a.out}")
    return EXIT_PASS


def replay(a: argparse.Namespace) -> int:
    bad = [f for f in a.fault if f not in KNOWN_FAULTS]
    if bad:
        raise BadInput(f"unknown fault {bad[0]!r}; known: {', '.join(sorted(KNOWN_FAULTS))}")
    _check_runner(a.runner)
    try:
        res = steptrace.replay(a.trace, a.runner, tuple(a.fault), a.model)
    except RunnerError as e:
        raise BadInput(f"step trace {a.trace}: {e}") from None
    if a.json:
        print(json.dumps(res.to_dict(), indent=2))
    elif res.first is None:
        print(f"{a.runner}: agrees with the recording on all {res.steps} steps")
    else:
        f = res.first
        print(f"{a.runner}: first divergent step: {f.instance} step {f.step} (trace line "
              f"{f.event_index}), request {f.req_id}: recorded {f.recorded}, replayed "
              f"{f.replayed}; {res.diverged_steps} of {res.steps} steps differ")
    return EXIT_PASS if res.first is None else EXIT_REGRESSION


def main(a: argparse.Namespace) -> int:
    return record(a) if a.steps_cmd == "record" else replay(a)
