"""Decode-sized GEMMs (at most 64 rows) in Triton, for the CUDA bf16/fp16 path.

A decode step's projections read every weight once for a handful of activation rows, so
they are bound by memory, not arithmetic. cuBLAS is about as fast per GEMM at 64 rows
(docs/performance.md, "Kernel tuning"), so this kernel earns its place by what cuBLAS
cannot do:

- it takes part in programmatic dependent launch (`triton_base`), so a layer's kernels
  launch under each other's tails, and it prefetches its first weight columns into L2
  before waiting on its predecessor;
- `gated=True`: gate_up's epilogue applies SiLU(gate) * up, so the separate
  `silu_and_mul` kernel and the [T, 2I] tensor between them are gone;
- `split_k=S > 1`: the result is S float32 partial sums [S, T, N], which
  `triton_fused.add_rms_norm` adds up and rounds once to the model dtype, as one GEMM's
  output would be (o_proj and down_proj are both followed by that kernel), instead of
  cuBLAS's own split-K reduction kernel.

One program per 32 output columns and K slice, 6-deep load pipeline. The tiling does not
depend on the number of rows (masked up to 64), so a row's result is bit-for-bit the same
in a batch of 1 or of 64: a request's tokens do not depend on who shares its step. Larger
batches (prefill) and shapes the tiling does not divide go to cuBLAS.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .triton_base import launch_options, pdl, pdl_enter, prefetch_l2, triton
from .triton_fused import silu_and_mul

MAX_ROWS = 64
BLOCK_M = 64     # all rows in one tile
BLOCK_N = 32     # output columns per program: 64-128 programs for a 2048-wide output
BLOCK_K = 128
STAGES = 6
# With PDL, each program asks L2 for the first 512 columns (1 KB) of its weight rows before
# it waits on the previous kernel, so its pipeline starts warm; more only evicts what other
# kernels need (docs/performance.md, "What made V2 faster").
PREFETCH_COLS = 512

if triton is not None:
    import triton.language as tl

    @triton.jit(do_not_specialize=["M"])
    def _skinny_gemm(X, W, OUT, M, stride_xm, K: tl.constexpr, N: tl.constexpr,
                     SPLIT_K: tl.constexpr, GATED: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PF_K: tl.constexpr,
                     PDL: tl.constexpr):
        """OUT[s, m, n] = sum over K slice s of X[m, k] * W[n, k]. GATED (one slice): W is
        [gate; up] of 2N rows and OUT[m, n] = SiLU(X W_gate^T)[m, n] * (X W_up^T)[m, n]."""
        pid_n = tl.program_id(0)
        pid_s = tl.program_id(1)
        if PF_K > 0:
            # The weights are no kernel's output: ask L2 for the first PF_K columns of this
            # program's rows while the previous kernel still runs (PDL).
            lines = tl.arange(0, PF_K // 64) * 64
            rows_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            pf = W + rows_n[:, None] * K + pid_s * (K // SPLIT_K) + lines[None, :]
            prefetch_l2(pf)
            if GATED:
                prefetch_l2(pf + N * K)
        pdl_enter(PDL)
        offs_m = tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = pid_s * (K // SPLIT_K) + tl.arange(0, BLOCK_K)
        rows = offs_m[:, None] < M
        xp = X + offs_m[:, None] * stride_xm + offs_k[None, :]
        wp = W + offs_n[None, :] * K + offs_k[:, None]          # W [N, K] read as [K, N] tiles
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for _ in range(0, K // SPLIT_K, BLOCK_K):
            a = tl.load(xp, mask=rows, other=0.0)
            acc = tl.dot(a, tl.load(wp), acc)
            if GATED:
                acc_up = tl.dot(a, tl.load(wp + N * K), acc_up)
            xp += BLOCK_K
            wp += BLOCK_K
        out = OUT + pid_s * M * N + offs_m[:, None] * N + offs_n[None, :]
        if GATED:
            # Rounded where the unfused ops round: the projection's output, F.silu, the product.
            dt = OUT.dtype.element_ty
            g = acc.to(dt).to(tl.float32)
            s = (g / (1.0 + tl.exp(-g))).to(dt).to(tl.float32)
            tl.store(out, (s * acc_up.to(dt).to(tl.float32)).to(dt), mask=rows)
        else:
            tl.store(out, acc.to(OUT.dtype.element_ty), mask=rows)


def applies(x: torch.Tensor, weight: torch.Tensor, split_k: int = 1, gated: bool = False) -> bool:
    """Whether `linear` runs the Triton kernel for these operands (else cuBLAS)."""
    N, K = weight.shape
    if gated:
        N //= 2
    return (triton is not None and x.is_cuda and x.dtype in (torch.bfloat16, torch.float16)
            and weight.dtype == x.dtype and weight.is_contiguous() and x.stride(-1) == 1
            and 0 < x.shape[0] <= MAX_ROWS and x.shape[1] == K and not (gated and split_k > 1)
            and N % BLOCK_N == 0 and K % (split_k * BLOCK_K) == 0)


def _prefetch_cols(k_slice: int) -> int:
    """Weight columns each program prefetches before its PDL wait: a power of two of whole
    128-byte lines, at most its K slice; none without PDL."""
    n = min(PREFETCH_COLS, k_slice)
    return 1 << (n.bit_length() - 1) if pdl() and n >= 64 else 0


def linear(x: torch.Tensor, weight: torch.Tensor, split_k: int = 1,
           gated: bool = False) -> torch.Tensor:
    """x @ weight.T for x [T, K], weight [N, K]; with `gated`, weight is [gate; up] [2N, K]
    and the result SiLU(x @ gate.T) * (x @ up.T) [T, N].

    Returns [T, N] in x's dtype, or, when the kernel applies and split_k > 1, float32
    partial sums [split_k, T, N] for `add_rms_norm` to finish."""
    if not applies(x, weight, split_k, gated):
        if gated:
            return silu_and_mul(F.linear(x, weight))
        return F.linear(x, weight)
    N, K = weight.shape
    if gated:
        N //= 2
    T = x.shape[0]
    out = torch.empty(split_k, T, N, device=x.device,
                      dtype=torch.float32 if split_k > 1 else x.dtype)
    _skinny_gemm[(N // BLOCK_N, split_k)](
        x, weight, out, T, x.stride(0), K=K, N=N, SPLIT_K=split_k, GATED=gated,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        PF_K=_prefetch_cols(K // split_k), num_warps=4, num_stages=STAGES,
        **launch_options())
    return out if split_k > 1 else out[0]
