"""Per-kernel timings of the 1B decode step's CUDA kernels at batch 64, against cuBLAS.

    PYTHONPATH=. python benchmarks/bench_kernels.py [--out DIR]

Each figure is the median over 30 replays of a CUDA graph that runs the kernel once per
layer over 16 distinct weight (or KV-cache) copies, so L2 holds none of them, divided by
16. The Triton GEMMs launch as in the step, so with PDL (Hopper) each of the 16 overlaps
the tail of the one before and prefetches its first weight columns meanwhile;
`MRBENCH_TRITON_PDL=0` gives the figures without. The attention sweep launches without
PDL. `bench_gpu.py` measures whole steps.

- a 1 GiB device-to-device copy: the card's bandwidth ceiling (read + write bytes);
- `triton_gemm.linear` at the 1B model's four projection shapes (qkv, o with split-K 2,
  gate_up with its SiLU x up epilogue, down with split-K 2) against cuBLAS (`F.linear`,
  plus `silu_and_mul` for gate_up);
- the decode attention variant at 64 rows of 129-256 keys (32 heads, 8 KV heads,
  head dim 64), over 18 tilings, the one in use marked.

Prints a table and writes bench_kernels.json to --out (default $OUT, else
results/bench_kernels). Without CUDA it prints why and exits 0.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LAYERS = 16
ROWS = 64
GEMMS = [("qkv", 3072, 2048, 1, False), ("o", 2048, 2048, 2, False),
         ("gate_up+silu", 8192, 2048, 1, True), ("down", 2048, 8192, 2, False)]


def graph_us(fn, reps: int = 30) -> float:
    """Median µs of one replay of a graph holding `fn` (after 2 eager warm runs)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    return sorted(ts)[len(ts) // 2]


def bench_gemms() -> list[dict]:
    from mrbench.runner_impl.model import triton_fused, triton_gemm
    rows = []
    for name, N, K, split, gated in GEMMS:
        ws = [torch.randn(2 * N if gated else N, K, device="cuda", dtype=torch.bfloat16) * 0.02
              for _ in range(LAYERS)]
        x = torch.randn(ROWS, K, device="cuda", dtype=torch.bfloat16)
        tri = graph_us(lambda: [triton_gemm.linear(x, w, split_k=split, gated=gated)
                                for w in ws]) / LAYERS
        cub = graph_us(lambda: [triton_fused.silu_and_mul(F.linear(x, w)) if gated
                                else F.linear(x, w) for w in ws]) / LAYERS
        nbytes = ws[0].numel() * 2
        rows.append(dict(kernel=f"GEMM {name}", shape=f"{ws[0].shape[0]}x{K}",
                         mb=nbytes / 1e6,
                         triton_us=tri, cublas_us=cub, triton_tb_s=nbytes / tri / 1e6))
    return rows


def bench_attention() -> list[dict]:
    from mrbench.runner_impl.model import triton_attention as ta
    torch.manual_seed(0)
    H, KVH, D, BS, maxb = 32, 8, 64, 16, 32
    caches = [torch.randn(2, ROWS * maxb + 1, BS, KVH, D, device="cuda", dtype=torch.bfloat16)
              for _ in range(LAYERS)]
    seq = torch.randint(129, 257, (ROWS,), device="cuda")
    table = (torch.randperm(ROWS * maxb, device="cuda").view(ROWS, maxb) + 1).contiguous()
    qsl = torch.arange(ROWS + 1, device="cuda")
    q = torch.randn(ROWS, H, D, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(q)
    nbytes = int(seq.sum()) * KVH * D * 2 * 2
    rows = []
    for bn, stages, warps in itertools.product([32, 64, 128], [1, 2, 3], [2, 4]):
        def run():
            for c in caches:
                ta._varlen_paged_attention[(1, ROWS, KVH)](
                    q, c[0], c[1], out, qsl, seq, table, D ** -0.5, STRIDE_QT=q.stride(0),
                    H=H, KVH=KVH, G=H // KVH, D=D, BS=BS, MAXB=maxb, BLOCK_Q=4, BLOCK_N=bn,
                    num_warps=warps, num_stages=stages, PDL=False)
        us = graph_us(run, reps=20) / LAYERS
        rows.append(dict(kernel="decode attention", shape=f"BLOCK_N {bn}, {stages} stages, "
                         f"{warps} warps" + (" (in use)" if (bn, stages, warps) == (128, 2, 4)
                                             else ""),
                         mb=nbytes / 1e6, triton_us=us, cublas_us=None,
                         triton_tb_s=nbytes / us / 1e6))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_kernels: no CUDA device; nothing to measure")
        return 0
    big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(big)
    copy_us = graph_us(lambda: dst.copy_(big), reps=10)
    del big, dst
    rows = bench_gemms() + bench_attention()
    env = dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
               copy_1gib_tb_s=2 * (1 << 30) / copy_us / 1e6)
    print(f"{env['device']}; torch {env['torch']}; 1 GiB copy {env['copy_1gib_tb_s']:.2f} TB/s "
          "(read + write)")
    print(f"{'kernel':18s} {'shape':34s} {'MB':>6s} {'triton us':>10s} {'cuBLAS us':>10s} "
          f"{'TB/s':>5s}")
    for r in rows:
        cub = "" if r["cublas_us"] is None else f"{r['cublas_us']:.1f}"
        print(f"{r['kernel']:18s} {r['shape']:34s} {r['mb']:6.1f} {r['triton_us']:10.1f} "
              f"{cub:>10s} {r['triton_tb_s']:5.2f}")
    out = Path(a.out or os.environ.get("OUT") or ROOT / "results" / "bench_kernels")
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "bench_kernels.json.tmp"
    tmp.write_text(json.dumps(dict(env=env, rows=rows), indent=2))
    tmp.replace(out / "bench_kernels.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
