"""Does a CPU forward that starts after a gap run slower than one run back to back? A CPU
experiment, no GPU needed.

Why: the slow-step ruler (runner_impl/slow_step.py) busies the host for PCT % of the step
before the forward. On the 2-core CI machines a V2 step under slow-step:80 measured its
own part (the step less the ruler's busy time) ~19 % slower than a clean V2 step, and
quick's slow-step:50 moved the median step +131 % against V1 where V2's clean excess times
1.5 predicts about +71 %. If a forward after G ms of anything else runs c * G ms longer,
the ruler's base (the step less its busy time) takes in c * PCT % of itself, and the next
step's busy work grows with it: the base settles at clean / (1 - c * PCT / 100), so the
step moves by more than PCT (docs/detection-power.md, "The ruler").

Each round runs, for every gap in turn, `--forwards` timed forwards of a torch MLP after a
gap of that many ms of busy work: `spin` (a host loop on the clock, the ruler's work),
`torch` (small matmuls, other tensor work) or `sleep` (an idle core). It prints, per gap,
the median time of the first forward after the gap and of the later ones, and c: the
extra time of those forwards over the no-gap ones, per ms of gap.

Usage: python research/gap_cost_probe.py [--gaps 0,0.3,1,3,6,10] [--kind spin] [--rounds 300]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch


def _gap(ms: float, kind: str, w: torch.Tensor, y: torch.Tensor) -> None:
    """`ms` of `kind` work before the next forward."""
    if ms <= 0:
        return
    if kind == "sleep":
        time.sleep(ms / 1e3)
        return
    until = time.perf_counter() + ms / 1e3
    while time.perf_counter() < until:
        if kind == "torch":
            torch.mm(y, w)


def measure(gaps: list[float], kind: str, rounds: int, forwards: int, width: int,
            layers: int) -> dict[float, list[float]]:
    """Median forward time (ms) per gap, by the forward's place after the gap (0: first).
    The gaps interleave within each round, so a machine that drifts moves them alike."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    x, y = torch.randn(4, width), torch.randn(4, width)
    w = torch.randn(width, width)
    times: dict[float, list[list[float]]] = {g: [[] for _ in range(forwards)] for g in gaps}
    with torch.inference_mode():
        for _ in range(forwards + 10):                 # warm the allocator and the kernels
            model(x)
        for r in range(rounds):
            for g in gaps:
                _gap(g, kind, w, y)
                for k in range(forwards):
                    t = time.perf_counter()
                    model(x)
                    times[g][k].append((time.perf_counter() - t) * 1e3)
            if (r + 1) % max(1, rounds // 5) == 0:
                print(f"[gap_cost_probe] round {r + 1}/{rounds}", file=sys.stderr, flush=True)
    return {g: [statistics.median(ts) for ts in per_k] for g, per_k in times.items()}


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gaps", default="0,0.3,1,3,6,10", help="gap lengths in ms, 0 first")
    p.add_argument("--kind", choices=("spin", "torch", "sleep"), default="spin")
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--forwards", type=int, default=3, help="timed forwards after each gap")
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--layers", type=int, default=16)
    a = p.parse_args(argv)
    try:
        gaps = _floats(a.gaps)
    except ValueError:
        gaps = []
    if not gaps or gaps[0] != 0 or any(g < 0 for g in gaps):
        print("gap_cost_probe: --gaps must be comma-separated ms, >= 0, starting with 0",
              file=sys.stderr)
        return 2
    if a.rounds < 1 or a.forwards < 1 or a.width < 1 or a.layers < 1:
        print("gap_cost_probe: --rounds, --forwards, --width and --layers must be >= 1",
              file=sys.stderr)
        return 2
    med = measure(gaps, a.kind, a.rounds, a.forwards, a.width, a.layers)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, kind {a.kind}, "
          f"{a.rounds} rounds, MLP {a.layers}x{a.width}")
    print("gap_ms  " + "  ".join(f"fwd{k + 1}_ms" for k in range(a.forwards)) + "  c")
    for g in gaps:
        extra = sum(v - v0 for v, v0 in zip(med[g], med[0]))
        c = f"{extra / g:+.3f}" if g > 0 else "-"
        print(f"{g:<7g} " + "  ".join(f"{v:7.3f}" for v in med[g]) + f"  {c}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
