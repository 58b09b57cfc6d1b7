"""Fused elementwise kernels for the CUDA bf16/fp16 path, in Triton.

At a batch of 64 decode tokens, a 1B model's step spends about a third of its GPU time in
some 200 small kernels per step (RoPE as three kernels, the K/V cache writes, residual
adds, RMSNorm, SiLU and its product), each a few microseconds no matter how little it
does. These three kernels do the same arithmetic in 3 launches per layer instead of 11:

- `rope_and_cache`: RoPE on q and k straight from the fused qkv projection, and the K/V
  writes into the paged cache (its RoPE, `rope_rows`, is also the decode attention
  launch's prologue, which does this work itself for uniform decode);
- `add_rms_norm`: the residual add and the next RMSNorm (vLLM's fused_add_rms_norm), also
  finishing the split-K partial sums of `triton_gemm`;
- `silu_and_mul`: SiLU(gate) * up (decode batches get it in gate_up's GEMM epilogue).

Each rounds where the unfused PyTorch ops round (every op of those ends in the model
dtype), so the two paths agree to the last bit or within one unit of it where a
reduction's order differs (RMSNorm's sum of squares). float32/float64 and the CPU keep the
PyTorch ops.
"""
from __future__ import annotations

import torch

from .triton_base import launch_options, pdl_enter, triton

if triton is not None:
    import triton.language as tl

    @triton.jit
    def rope_rows(QKV, COS, SIN, tok, head, valid, STRIDE_T: tl.constexpr, D: tl.constexpr):
        """RoPE'd rows [len(tok), D]: head `head[i]` of token `tok[i]` of the qkv projection,
        rounded twice, as `addcmul(x * cos, x.roll(D // 2), sin)` in the model dtype is
        (sin sign-folded, see llama.py). Also the decode attention's prologue."""
        offs = tl.arange(0, D)
        rolled = (offs + D // 2) % D               # x.roll(D // 2)[i] = x[i - D/2 mod D]
        row = QKV + tok[:, None] * STRIDE_T + head[:, None] * D
        m = valid[:, None]
        x = tl.load(row + offs[None, :], mask=m, other=0.0)
        xr = tl.load(row + rolled[None, :], mask=m, other=0.0).to(tl.float32)
        cos = tl.load(COS + tok[:, None] * D + offs[None, :], mask=m, other=0.0).to(tl.float32)
        sin = tl.load(SIN + tok[:, None] * D + offs[None, :], mask=m, other=0.0).to(tl.float32)
        a = (x.to(tl.float32) * cos).to(x.dtype).to(tl.float32)
        return (a + xr * sin).to(x.dtype)

    @triton.jit
    def _rope_and_cache(QKV, COS, SIN, SLOTS, KC, VC, QOUT, STRIDE_T: tl.constexpr,
                        H: tl.constexpr, KVH: tl.constexpr, D: tl.constexpr, PDL: tl.constexpr):
        pdl_enter(PDL)
        t = tl.program_id(0)
        h = tl.program_id(1)                       # 0..H-1: q heads; H..H+KVH-1: k/v heads
        one = tl.arange(0, 1)
        offs = tl.arange(0, D)[None, :]
        out = rope_rows(QKV, COS, SIN, t + one, h + one, one < 1, STRIDE_T, D)   # [1, D]
        if h < H:
            tl.store(QOUT + (t * H + h) * D + offs, out)
        else:
            slot = tl.load(SLOTS + t)
            kvh = h - H
            tl.store(KC + (slot * KVH + kvh) * D + offs, out)
            v = tl.load(QKV + t * STRIDE_T + (H + KVH + kvh) * D + offs)
            tl.store(VC + (slot * KVH + kvh) * D + offs, v)

    @triton.jit
    def _add_rms_norm(X, RES, W, OUT, RES_OUT, eps, STRIDE_S, N: tl.constexpr,
                      BLOCK: tl.constexpr, HAS_RES: tl.constexpr, SPLIT: tl.constexpr,
                      PDL: tl.constexpr):
        pdl_enter(PDL)
        t = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        mask = offs < N
        x = tl.load(X + t * N + offs, mask=mask, other=0.0)
        if SPLIT > 1:
            # float32 partial sums of a split-K GEMM: added in order, then rounded once
            # to the model dtype, as one GEMM's output is.
            xs = x.to(tl.float32)
            for s in tl.static_range(1, SPLIT):
                xs += tl.load(X + s * STRIDE_S + t * N + offs, mask=mask, other=0.0)
            x = xs.to(OUT.dtype.element_ty)
        if HAS_RES:
            # The residual add rounds to the model dtype first, as `x + y` does.
            x = (x.to(tl.float32) + tl.load(RES + t * N + offs, mask=mask, other=0.0)
                 .to(tl.float32)).to(OUT.dtype.element_ty)
        if HAS_RES or SPLIT > 1:
            tl.store(RES_OUT + t * N + offs, x, mask=mask)
        xf = x.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(xf * xf, 0) / N + eps)
        w = tl.load(W + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(OUT + t * N + offs, (xf * rstd * w).to(OUT.dtype.element_ty), mask=mask)

    @triton.jit
    def _silu_and_mul(GU, OUT, N: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
        pdl_enter(PDL)
        t = tl.program_id(0)
        offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < N
        g = tl.load(GU + t * 2 * N + offs, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(GU + t * 2 * N + N + offs, mask=mask, other=0.0)
        s = (g / (1.0 + tl.exp(-g))).to(OUT.dtype.element_ty)    # F.silu rounds here
        tl.store(OUT + t * N + offs, (s.to(tl.float32) * u.to(tl.float32))
                 .to(OUT.dtype.element_ty), mask=mask)


def rope_and_cache(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, slots: torch.Tensor,
                   kv_cache: torch.Tensor, num_heads: int, num_kv_heads: int,
                   head_dim: int) -> torch.Tensor:
    """qkv [T, (H + 2 KVH) * D] (rows contiguous), cos/sin [T, 1, D] in the model dtype,
    slots [T] int64, kv_cache [2, blocks, bs, KVH, D]. Writes RoPE'd k and v at `slots`;
    returns RoPE'd q [T, H, D]."""
    T = qkv.shape[0]
    assert qkv.stride(1) == 1 and cos.is_contiguous() and sin.is_contiguous()
    q = torch.empty(T, num_heads, head_dim, dtype=qkv.dtype, device=qkv.device)
    _rope_and_cache[(T, num_heads + num_kv_heads)](
        qkv, cos, sin, slots, kv_cache[0], kv_cache[1], q, STRIDE_T=qkv.stride(0),
        H=num_heads, KVH=num_kv_heads, D=head_dim, num_warps=1, **launch_options())
    return q


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual) * weight, x + residual); with residual None, no add.

    x is [T, N] in the model dtype (weight's), or float32 partial sums [S, T, N] from a
    split-K `triton_gemm.linear`, which are added up and rounded first."""
    split = x.shape[0] if x.dim() == 3 else 1
    T, N = x.shape[-2:]
    out = torch.empty(T, N, dtype=weight.dtype, device=x.device)
    res_out = (torch.empty_like(out) if residual is not None or split > 1 else x)
    _add_rms_norm[(T,)](x, residual if residual is not None else x, weight, out, res_out, eps,
                        T * N, N=N, BLOCK=triton.next_power_of_2(N),
                        HAS_RES=residual is not None, SPLIT=split,
                        num_warps=4 if N <= 4096 else 8, **launch_options())
    return out, res_out


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SiLU(gate) * up of gate_up [T, 2N] = [gate | up]; returns [T, N]."""
    T, N2 = gate_up.shape
    N = N2 // 2
    out = torch.empty(T, N, dtype=gate_up.dtype, device=gate_up.device)
    BLOCK = 1024
    _silu_and_mul[(T, triton.cdiv(N, BLOCK))](gate_up, out, N=N, BLOCK=BLOCK, num_warps=4,
                                                   **launch_options())
    return out
