"""Does a process that compiled Triton kernels run its host work slower afterwards? A CPU
experiment, no GPU needed.

Why: on the H100 and H200 an engine process that compiled its Triton kernels at start ran
its host gap between steps ~9 % slower for its whole life than one that loaded them from
the cache (docs/detection-power.md, "A cold compile cache"), which is why the harness
rebuilds such engines (`--cold-engines`). This reproduces the effect where CI-sized machines
can: Triton compiles kernels for an sm_90 target without a GPU, and the bundled runner's
step on a tiny model is host-bound on CPU too.

Each round runs one child process per mode, in turn, each on one thread:
- `cold`: an empty TRITON_CACHE_DIR; the main thread compiles 24 matmul kernels (sm_90);
- `warm`: the same calls against a filled cache, so they load (what a rebuilt engine does);
- `thread`: an empty cache, the same compile in a worker thread (glibc gives a non-main
  thread its own malloc arena, so the compiler's allocations stay out of the main one);
then each builds the bundled V2 runner on CPU (a 2-layer random Llama), warms it, and
generates for `--seconds`, recording the median decode step and the median host gap
between steps. Per mode against `warm`, the per-round log ratios of the median step give a
Hodges-Lehmann estimate with its signed-rank CI (stats.hodges_lehmann_ci_signed_rank) and
an exact sign test (stats.sign_test_exact).

Needs Triton (`pip install triton`; not an mrbench dependency): without it, one line and
exit 2. Usage: python research/cold_compile_probe.py [--rounds 5] [--seconds 6]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from importlib.util import find_spec
from pathlib import Path

import numpy as np

from mrbench.harness.checks.stats import hodges_lehmann_ci_signed_rank, sign_test_exact

ROOT = Path(__file__).resolve().parents[1]
MODES = ("cold", "warm", "thread")


def _compile_kernels() -> None:
    """24 matmul kernels for sm_90: the compiler's work, no device needed."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def mm(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            x = tl.load(a + rm[:, None] * K + (k + rk)[None, :],
                        mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
            y = tl.load(b + (k + rk)[:, None] * N + rn[None, :],
                        mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc += tl.dot(x, y)
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))

    sig = {"a": "*bf16", "b": "*bf16", "c": "*bf16", "M": "i32", "N": "i32", "K": "i32",
           "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}
    for bm in (16, 32, 64, 128):
        for bn in (32, 64, 128):
            for bk in (32, 64):
                src = ASTSource(mm, sig, constexprs={"BM": bm, "BN": bn, "BK": bk})
                triton.compile(src, target=GPUTarget("cuda", 90, 32))


def child(mode: str, model_dir: str, seconds: float) -> dict:
    """One process's measurement (run with --child)."""
    import torch
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    if mode == "thread":
        th = threading.Thread(target=_compile_kernels)
        th.start()
        th.join()
    else:
        _compile_kernels()
    compile_s = time.perf_counter() - t0
    from mrbench.runner_impl import LLM, SamplingParams
    llm = LLM(model=model_dir, runner="v2", device="cpu", max_num_seqs=16,
              max_num_batched_tokens=512)
    prompts = [[1 + (i * 7 + j) % 90 for j in range(24)] for i in range(16)]
    sp = SamplingParams(temperature=0, max_tokens=96, ignore_eos=True)
    llm.generate(prompts, sp)                       # warm the engine
    steps, gaps = [], []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        n0 = len(llm.step_records)
        llm.generate(prompts, sp)
        recs = [r for r in llm.step_records[n0:] if r.num_new_reqs == 0]      # decode steps
        for a, b in zip(recs, recs[1:]):
            steps.append((b.t_end - b.t_start) * 1e3)
            gaps.append((b.t_start - a.t_end) * 1e3)
    return dict(mode=mode, compile_s=round(compile_s, 2), steps=len(steps),
                step_ms=statistics.median(steps), gap_ms=statistics.median(gaps))


def _tiny_model(where: Path) -> str:
    """A 2-layer random Llama (hidden 64, GQA 4:2), the tests' shape."""
    from mrbench.runner_impl.model.random_presets import Preset, write_model
    return str(write_model(where, Preset(64, 2, 4, 2, 128, 96, 512, False, 10000.0, 0.2,
                                         "float32"), name="probe"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child, a.model, a.seconds)))
        return 0
    if find_spec("triton") is None:
        print("cold_compile_probe: needs Triton (pip install triton); it is not an mrbench "
              "dependency", file=sys.stderr)
        return 2
    if a.rounds < 2 or a.seconds <= 0:
        print("cold_compile_probe: --rounds must be >= 2 and --seconds > 0", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = _tiny_model(tmp / "model")
        warm_cache = tmp / "warm-cache"
        rows: dict[str, list[dict]] = {m: [] for m in MODES}
        for r in range(a.rounds):
            for mode in MODES:
                cache = warm_cache if mode == "warm" else tmp / f"cold-{r}-{mode}"
                env = dict(os.environ, TRITON_CACHE_DIR=str(cache),
                           PYTHONPATH=os.pathsep.join(filter(None, (
                               str(ROOT), os.environ.get("PYTHONPATH")))))
                if mode == "warm" and not warm_cache.exists():      # fill it once, unmeasured
                    subprocess.run([sys.executable, __file__, "--child", "cold", "--model",
                                    model, "--seconds", "0.1"], env=env, check=True,
                                   capture_output=True)
                out = subprocess.run([sys.executable, __file__, "--child", mode, "--model",
                                      model, "--seconds", str(a.seconds)], env=env,
                                     check=True, capture_output=True, text=True).stdout
                res = json.loads(out.strip().splitlines()[-1])
                rows[mode].append(res)
                print(f"round {r + 1} {mode:6s} compile {res['compile_s']:5.2f} s  step "
                      f"{res['step_ms']:.3f} ms  gap {res['gap_ms']:.4f} ms  "
                      f"({res['steps']} steps)", flush=True)
    for mode in ("cold", "thread"):
        for what in ("step_ms", "gap_ms"):
            d = np.log([x[what] / w[what] for x, w in zip(rows[mode], rows["warm"])])
            ci = hodges_lehmann_ci_signed_rank(d)
            t = sign_test_exact(int((d > 0).sum()), int((d < 0).sum()), "greater")
            pct = lambda v: 100 * np.expm1(v)  # noqa: E731
            print(f"{mode} vs warm, {what[:-3]}: {pct(ci.estimate):+.1f} % "
                  f"[{pct(ci.lo):+.1f}, {pct(ci.hi):+.1f}] ({ci.level:.0%}), slower in "
                  f"{(d > 0).sum()}/{d.size} rounds, sign test p = {t.p_value:.2g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
