"""Varlen paged attention on CUDA, in Triton: every bf16/fp16 batch, uniform decode (and
its CUDA graphs) included.

One launch attends every row of a flat batch (any mix of prefill chunks and decode rows)
straight from the paged KV cache: no gather of whole rows, no dense mask. Grid: (query
block, row, KV head); each program holds BLOCK_Q query tokens times the G query heads that
share its KV head (GQA without copying K/V), walks the row's blocks up to its causal limit
and keeps an online softmax in float32.

Like vLLM's Triton attention backend, the kernel is compiled just in time, at its first
launch in a process (or loaded from Triton's disk cache): the first prefill pays for it
unless warmup ran one. Every argument that changes from batch to batch is a tensor or an
unspecialised float, so one compilation serves every batch shape of a model.
"""
from __future__ import annotations

import torch

from .triton_base import launch_options, pdl_enter, triton

BLOCK_M = 64   # query rows per program: BLOCK_Q tokens x G heads
BLOCK_N = 64   # keys per iteration


def supported(dtype: torch.dtype, head_dim: int, group: int) -> bool:
    return (triton is not None and dtype in (torch.bfloat16, torch.float16)
            and head_dim in (16, 32, 64, 128) and BLOCK_M % group == 0)


if triton is not None:
    import triton.language as tl

    from .triton_fused import rope_rows

    @triton.jit
    def _varlen_paged_attention(Q, K, V, O, QSL, SEQ, BT, sm_scale,
                                STRIDE_QT: tl.constexpr, H: tl.constexpr, KVH: tl.constexpr,
                                G: tl.constexpr, D: tl.constexpr, BS: tl.constexpr,
                                MAXB: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr,
                                PDL: tl.constexpr, ROPE: tl.constexpr = False, COS=None,
                                SIN=None, SLOTS=None):
        """ROPE: Q is the qkv projection [T, (H + 2 KVH) * D]; the program applies RoPE to
        its q heads, and writes its KV head's RoPE'd k and v of the row's tokens into the
        cache before attending (only when one program holds all of a row's tokens)."""
        pdl_enter(PDL)
        j = tl.program_id(0)
        r = tl.program_id(1)
        h = tl.program_id(2)
        q_start = tl.load(QSL + r)
        qlen = tl.load(QSL + r + 1) - q_start
        if j * BLOCK_Q < qlen:
            seq_len = tl.load(SEQ + r)
            ctx = seq_len - qlen                       # position of the row's first query
            offs_m = tl.arange(0, BLOCK_Q * G)
            qi = j * BLOCK_Q + offs_m // G
            head = h * G + offs_m % G
            m_valid = qi < qlen
            tok = q_start + qi
            offs_d = tl.arange(0, D)
            if ROPE:
                q = rope_rows(Q, COS, SIN, tok, head, m_valid, STRIDE_QT, D)
                offs_t = tl.arange(0, BLOCK_Q)
                t_valid = offs_t < qlen
                ttok = q_start + offs_t
                k_new = rope_rows(Q, COS, SIN, ttok, H + h + 0 * offs_t, t_valid, STRIDE_QT, D)
                v_new = tl.load(Q + ttok[:, None] * STRIDE_QT + (H + KVH + h) * D
                                + offs_d[None, :], mask=t_valid[:, None], other=0.0)
                slot = tl.load(SLOTS + ttok, mask=t_valid, other=0)
                dst = slot[:, None] * (KVH * D) + h * D + offs_d[None, :]
                tl.store(K + dst, k_new, mask=t_valid[:, None])
                tl.store(V + dst, v_new, mask=t_valid[:, None])
                tl.debug_barrier()        # the program's own writes, visible to its loads
            else:
                q = tl.load(Q + tok[:, None] * STRIDE_QT + head[:, None] * D + offs_d[None, :],
                            mask=m_valid[:, None], other=0.0)
            qpos = ctx + qi
            m_i = tl.full([BLOCK_Q * G], float("-inf"), tl.float32)
            l_i = tl.zeros([BLOCK_Q * G], tl.float32)
            acc = tl.zeros([BLOCK_Q * G, D], tl.float32)
            kv_end = tl.minimum(seq_len, ctx + (j + 1) * BLOCK_Q)   # causal limit of the block
            offs_n = tl.arange(0, BLOCK_N)
            for start in range(0, kv_end, BLOCK_N):
                kpos = start + offs_n
                n_valid = kpos < kv_end
                blk = tl.load(BT + r * MAXB + kpos // BS, mask=n_valid, other=0)
                off = (blk * BS + kpos % BS)[:, None] * (KVH * D) + h * D + offs_d[None, :]
                k = tl.load(K + off, mask=n_valid[:, None], other=0.0)
                v = tl.load(V + off, mask=n_valid[:, None], other=0.0)
                s = tl.dot(q, tl.trans(k)) * sm_scale
                s = tl.where((kpos[None, :] <= qpos[:, None]) & n_valid[None, :], s, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(s, 1))
                alpha = tl.exp(m_i - m_new)
                p = tl.exp(s - m_new[:, None])
                l_i = l_i * alpha + tl.sum(p, 1)
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
                m_i = m_new
            out = acc / l_i[:, None]
            tl.store(O + tok[:, None] * (H * D) + head[:, None] * D + offs_d[None, :],
                     out.to(O.dtype.element_ty), mask=m_valid[:, None])


def varlen_paged_attention(q: torch.Tensor, kv_cache: torch.Tensor, query_start_loc: torch.Tensor,
                           seq_lens: torch.Tensor, block_table: torch.Tensor, max_query_len: int,
                           scale: float, uniform_decode: bool = False) -> torch.Tensor:
    """q [T, H, D] (token stride free, head and dim contiguous); kv_cache [2, blocks, bs, KVH, D];
    query_start_loc [R+1], seq_lens [R] (context including this step's tokens), block_table
    [R, max_blocks], all int64 on the device. Returns [T, H * D]."""
    T, H, D = q.shape
    assert q.stride(2) == 1 and q.stride(1) == D
    return _launch(q, H, kv_cache, query_start_loc, seq_lens, block_table, max_query_len,
                   scale, uniform_decode, None)


def fuses_rope(uniform_decode: bool, max_query_len: int, num_heads: int,
               num_kv_heads: int) -> bool:
    """Whether `rope_cache_attention` applies: a uniform-decode batch whose rows each fit in
    one program (1 + k <= the decode variant's query tokens), so no program reads a cache
    slot that another program of the launch writes."""
    return uniform_decode and max_query_len <= _block_q(True, num_heads // num_kv_heads)


def rope_cache_attention(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         slots: torch.Tensor, kv_cache: torch.Tensor,
                         query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
                         block_table: torch.Tensor, max_query_len: int, scale: float,
                         num_heads: int) -> torch.Tensor:
    """`triton_fused.rope_and_cache` and then the decode variant of `varlen_paged_attention`,
    in one launch (where `fuses_rope`): qkv [T, (H + 2 KVH) * D] rows contiguous, cos/sin
    [T, 1, D] in the model dtype, slots [T]. Same values, bit for bit; returns [T, H * D]."""
    assert qkv.stride(1) == 1 and cos.is_contiguous() and sin.is_contiguous()
    return _launch(qkv, num_heads, kv_cache, query_start_loc, seq_lens, block_table,
                   max_query_len, scale, True, (cos, sin, slots))


def _block_q(uniform_decode: bool, G: int) -> int:
    # Query tokens per program. Two variants, each compiled once: uniform-decode batches
    # (1 + k tokens a row, the CUDA-graph path) take 16 // G rows of tokens (tl.dot's
    # minimum of 16 rows), so a decode program does not compute 16x the rows it keeps;
    # prefill and mixed batches take BLOCK_M // G. The choice depends on the batch kind
    # only, never on its lengths, so warming each kind once warms every batch of it.
    return max(1, 16 // G) if uniform_decode else BLOCK_M // G


def _launch(q: torch.Tensor, H: int, kv_cache: torch.Tensor, query_start_loc: torch.Tensor,
            seq_lens: torch.Tensor, block_table: torch.Tensor, max_query_len: int, scale: float,
            uniform_decode: bool, rope: tuple | None) -> torch.Tensor:
    T = q.shape[0]
    _, _, bs, KVH, D = kv_cache.shape
    G = H // KVH
    R, maxb = block_table.shape
    assert block_table.is_contiguous()
    out = torch.empty(T, H, D, dtype=q.dtype, device=q.device)
    block_q = _block_q(uniform_decode, G)
    # The decode variant walks 128 keys an iteration with 2 pipeline stages, the fastest
    # tiling measured with a cold L2 (docs/performance.md, "Kernel tuning").
    tuning = dict(BLOCK_N=128, num_stages=2) if uniform_decode else dict(BLOCK_N=BLOCK_N)
    if rope is not None:
        tuning.update(ROPE=True, COS=rope[0], SIN=rope[1], SLOTS=rope[2])
    grid = (triton.cdiv(max_query_len, block_q), R, KVH)
    _varlen_paged_attention[grid](
        q, kv_cache[0], kv_cache[1], out, query_start_loc, seq_lens, block_table, scale,
        STRIDE_QT=q.stride(0), H=H, KVH=KVH, G=G, D=D, BS=bs, MAXB=maxb, BLOCK_Q=block_q,
        num_warps=4, **tuning, **launch_options())
    return out.view(T, H * D)
