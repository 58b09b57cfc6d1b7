"""A Llama decoder in plain PyTorch, with paged attention over a flat batch that mixes
prefill and decode rows.

Everything the model needs to know about the batch comes in `AttentionMetadata`, and every
shape is taken from host ints in it, so `forward` never waits on the device: the runner can
queue the next step (or capture a CUDA graph) while this one runs.

On CUDA a few fused paths replace the reference ones (the CPU code is untouched). In
bf16/fp16: a Triton varlen paged-attention kernel (`triton_attention.py`) for every batch,
CUDA-graph decode included (which also applies RoPE and writes the cache), Triton kernels
(`triton_fused.py`) for RoPE with the cache writes, the residual add with the RMSNorm
after it, and SiLU with its product, and Triton GEMMs for decode-sized batches
(`triton_gemm.py`), all launched with programmatic dependent launch where the GPU has it
(`triton_base.py`). float32/
float64 on CUDA keep PyTorch ops: fused RMSNorm, RoPE in three kernels, the KV gather as a
row gather and memory-efficient SDPA.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from mrbench.runner_impl.errors import ModelLoadError
from mrbench.runner_impl.model.config import LlamaConfig

@dataclass
class AttentionMetadata:
    """Where each token of a flat, variable-length batch sits. Built by the runner."""

    query_start_loc: torch.Tensor  # [R+1] int32/int64, device: start of each row's query tokens in the flat batch
    seq_lens: torch.Tensor  # [R] int64, device: context length of each row INCLUDING this step's tokens (the truth)
    block_table: torch.Tensor  # [R, max_blocks_per_row] int64/int32, device: KV block ids of each row
    slot_mapping: torch.Tensor  # [T] int64, device: flat KV slot (block_id*block_size + offset) of each new token
    token_row: torch.Tensor  # [T] int64, device: which row each flat token belongs to
    token_offset: torch.Tensor  # [T] int64, device: index of the token inside its row's query (0..q_len-1)
    positions: torch.Tensor  # [T] int64, device: absolute position of each token
    max_query_len: int  # host int
    max_seq_len: int  # host int: an UPPER BOUND of seq_lens.max(), sizes the KV gather
    uniform_query_len: int | None = None  # host: every row has exactly this many query tokens -> fast path
    query_lens_cpu: Sequence[int] | None = None  # host: each row's query length; lets a mixed batch
    # split into contiguous row segments (decodes apart from prefill chunks) so no decode row is
    # padded to a prefill chunk's length. None = one segment padded to max_query_len.
    # slot_mapping must always be valid: "-1 = don't write" is NOT supported (skipping would need a
    # data-dependent mask); point padding tokens at a scratch block instead.


def kv_cache_bytes(config: LlamaConfig, num_blocks: int, block_size: int,
                   dtype: torch.dtype) -> int:
    """What `allocate_kv_cache` would take, asked before it allocates (a cache too large for
    what is free is refused in one line, not found by the OOM killer)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    per_token = 2 * config.num_key_value_heads * config.head_dim * itemsize
    return config.num_hidden_layers * num_blocks * block_size * per_token


def allocate_kv_cache(
    config: LlamaConfig, num_blocks: int, block_size: int, dtype: torch.dtype, device: str | torch.device
) -> list[torch.Tensor]:
    """One [2, num_blocks, block_size, num_kv_heads, head_dim] tensor per layer (index 0 = K, 1 = V).

    Zero-filled on purpose: attention gathers whole blocks and masks the unused slots, and a masked
    NaN from uninitialised memory would still poison the output (0 * NaN = NaN)."""
    shape = (2, num_blocks, block_size, config.num_key_value_heads, config.head_dim)
    return [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_hidden_layers)]


@dataclass
class _Segment:
    """Contiguous rows [row0, row1) and their tokens [tok0, tok1), attended as one padded grid."""

    tok0: int
    tok1: int
    num_rows: int
    query_len: int  # padded query length of every row in the segment
    block_ids: torch.Tensor  # [rows * nblk] int64
    mask: torch.Tensor  # [rows, 1, G * query_len, nblk * block_size] bool, G = query heads per KV head
    flat_index: torch.Tensor | None  # [tokens] position in the padded [rows * query_len] grid; None if uniform
    # CUDA only (None on CPU): the gather as rows of the flattened cache (K blocks, then V
    # blocks), and the mask as an additive bias in the model dtype, built once per step.
    kv_rows: torch.Tensor | None = None  # [2 * rows * nblk] int64
    bias: torch.Tensor | None = None  # like mask, 0 / -inf


@dataclass
class _StepPlan:
    """Per-forward tensors shared by every layer, so masks and RoPE are built once per step."""

    cos: torch.Tensor  # [T, 1, head_dim], model dtype
    sin: torch.Tensor  # on CUDA: sign-folded, so rotate_half(x) * sin == x.roll(D/2) * sin
    slots: torch.Tensor  # [T] int64
    segments: list[_Segment]
    # CUDA, bf16/fp16: (query_start_loc, seq_lens, block_table, max_query_len, uniform_decode)
    # for the Triton varlen kernel, which attends all rows at once (segments stay empty).
    varlen: tuple | None = None


SHORT_QUERY = 8  # rows with at most this many query tokens (decode, spec verify) share a segment


def row_segments(query_lens: Sequence[int]) -> list[tuple[int, int]]:
    """Split rows into contiguous runs of short (<= SHORT_QUERY) and long query lengths."""
    segs, start = [], 0
    for r in range(1, len(query_lens) + 1):
        if r == len(query_lens) or (query_lens[r] > SHORT_QUERY) != (query_lens[start] > SHORT_QUERY):
            segs.append((start, r))
            start = r
    return segs


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, dtype: torch.dtype, device: str | torch.device) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype, device=device))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda:
            # One fused kernel instead of eight; the same math, rounded once at the end.
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        # Normalise in float32 and scale in the model dtype, exactly as HF does.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def _linear(in_features: int, out_features: int, dtype: torch.dtype, device: str | torch.device) -> nn.Linear:
    # No random init: load_weights overwrites every parameter anyway.
    return torch.nn.utils.skip_init(nn.Linear, in_features, out_features, bias=False, dtype=dtype, device=device)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig, dtype: torch.dtype, device: str | torch.device) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        # q, k and v in one matmul (fewer kernel launches per decode step).
        self.qkv_proj = _linear(config.hidden_size, self.q_size + 2 * self.kv_size, dtype, device)
        self.o_proj = _linear(self.q_size, config.hidden_size, dtype, device)
        self.scale = self.head_dim**-0.5

    def forward(self, x: torch.Tensor, plan: _StepPlan, kv_cache: torch.Tensor) -> torch.Tensor:
        num_tokens = x.shape[0]
        H, KVH, D = self.num_heads, self.num_kv_heads, self.head_dim
        if plan.varlen is not None:
            # CUDA bf16/fp16 (`_forward_fused`): decode-sized projections in Triton, RoPE +
            # cache writes and attention (one kernel for decode); returns o_proj's split-K
            # partials where they apply.
            from . import triton_attention, triton_fused, triton_gemm  # lazy: Triton is CUDA-only (CPU runs never load it)
            qkv = triton_gemm.linear(x, self.qkv_proj.weight)
            qsl, seq_lens, block_table, max_q, uniform = plan.varlen
            if triton_attention.fuses_rope(uniform, max_q, H, KVH):   # decode: one launch
                out = triton_attention.rope_cache_attention(
                    qkv, plan.cos, plan.sin, plan.slots, kv_cache, qsl, seq_lens, block_table,
                    max_q, self.scale, H)
            else:
                q = triton_fused.rope_and_cache(qkv, plan.cos, plan.sin, plan.slots, kv_cache,
                                                H, KVH, D)
                out = triton_attention.varlen_paged_attention(
                    q, kv_cache, qsl, seq_lens, block_table, max_q, self.scale, uniform)
            return triton_gemm.linear(out, self.o_proj.weight, split_k=2)
        qkv = self.qkv_proj(x)
        if x.is_cuda:
            # RoPE on q and k together, in three kernels (plan.sin carries rotate_half's sign).
            qk = qkv[:, :self.q_size + self.kv_size].view(num_tokens, H + KVH, D)
            qk = torch.addcmul(qk * plan.cos, qk.roll(D // 2, -1), plan.sin)
            q, k = qk[:, :H], qk[:, H:]
            v = qkv[:, self.q_size + self.kv_size:].view(num_tokens, KVH, D)
        else:
            q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
            q = q.view(num_tokens, H, D)
            k = k.view(num_tokens, KVH, D)
            v = v.view(num_tokens, KVH, D)
            q = q * plan.cos + _rotate_half(q) * plan.sin
            k = k * plan.cos + _rotate_half(k) * plan.sin

        # 1. This step's K/V go into the paged cache first, so the gather below sees them.
        flat_cache = kv_cache.view(2, -1, KVH, D)
        flat_cache[0].index_copy_(0, plan.slots, k)
        flat_cache[1].index_copy_(0, plan.slots, v)

        # 2. Attend per segment (rows are contiguous in the flat batch, so outputs concatenate).
        outs = [self._attend(q[seg.tok0:seg.tok1], seg, kv_cache) for seg in plan.segments]
        return self.o_proj(outs[0] if len(outs) == 1 else torch.cat(outs))

    def _attend(self, q: torch.Tensor, seg: _Segment, kv_cache: torch.Tensor) -> torch.Tensor:
        H, KVH, D = self.num_heads, self.num_kv_heads, self.head_dim
        G, R, Q = H // KVH, seg.num_rows, seg.query_len
        # Each row's context, in order: [2, R, L, KVH, D] -> K, V as [R, KVH, L, D].
        if seg.kv_rows is not None:  # CUDA: a row gather of whole blocks (dim 0, contiguous)
            kv = kv_cache.view(-1, kv_cache[0, 0].numel()).index_select(0, seg.kv_rows)
            kv = kv.view(2, R, -1, KVH, D)
        else:
            kv = kv_cache.index_select(1, seg.block_ids).view(2, R, -1, KVH, D)
        keys, values = kv[0].transpose(1, 2), kv[1].transpose(1, 2)

        # Queries as a [R, Q, H, D] grid.
        if seg.flat_index is None:  # uniform rows: the flat tokens already are the grid
            q_grid = q.view(R, Q, H, D)
        else:  # ragged rows: scatter into a zero-padded grid
            q_grid = q.new_zeros(R * Q, H, D).index_copy_(0, seg.flat_index, q).view(R, Q, H, D)

        # GQA without copying K/V: the G query heads sharing a KV head become G*Q query rows
        # of that head (head h = kv_head * G + g, as HF's repeat_kv pairs them).
        q_grid = q_grid.view(R, Q, KVH, G, D).permute(0, 2, 3, 1, 4).reshape(R, KVH, G * Q, D)
        if seg.bias is not None:
            # CUDA: memory-efficient attention (math for float64). Not cuDNN's: it builds a
            # plan per new shape, tens of ms at every new prompt or context length.
            with sdpa_kernel(_CUDA_SDPA):
                out = F.scaled_dot_product_attention(q_grid, keys, values, attn_mask=seg.bias,
                                                     scale=self.scale)
        else:
            out = F.scaled_dot_product_attention(q_grid, keys, values, attn_mask=seg.mask, scale=self.scale)
        out = out.view(R, KVH, G, Q, D).permute(0, 3, 1, 2, 4).reshape(R * Q, H * D)
        return out if seg.flat_index is None else out.index_select(0, seg.flat_index)


_CUDA_SDPA = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def _triton_varlen_ok(dtype: torch.dtype, head_dim: int, group: int) -> bool:
    """CUDA prefill/mixed batches take the Triton kernel where it applies (bf16/fp16); the
    import is deferred so CPU runs never load Triton."""
    from . import triton_attention  # lazy: Triton is CUDA-only (CPU runs never load it)
    return triton_attention.supported(dtype, head_dim, group)


class MLP(nn.Module):
    def __init__(self, config: LlamaConfig, dtype: torch.dtype, device: str | torch.device) -> None:
        super().__init__()
        self.intermediate_size = config.intermediate_size
        self.gate_up_proj = _linear(config.hidden_size, 2 * config.intermediate_size, dtype, device)
        self.down_proj = _linear(config.intermediate_size, config.hidden_size, dtype, device)

    def forward(self, x: torch.Tensor, fused: bool = False) -> torch.Tensor:
        if fused:  # CUDA bf16/fp16: SiLU * up in gate_up's epilogue; down as split-K partials
            from . import triton_gemm  # lazy: Triton is CUDA-only (CPU runs never load it)
            act = triton_gemm.linear(x, self.gate_up_proj.weight, gated=True)
            return triton_gemm.linear(act, self.down_proj.weight, split_k=2)
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, config: LlamaConfig, dtype: torch.dtype, device: str | torch.device) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype, device)
        self.self_attn = Attention(config, dtype, device)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype, device)
        self.mlp = MLP(config, dtype, device)

    def forward(self, x: torch.Tensor, plan: _StepPlan, kv_cache: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), plan, kv_cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(nn.Module):
    """Llama with HF-compatible weights. Parameters are uninitialised until `load_weights`."""

    def __init__(
        self, config: LlamaConfig, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
    ) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = torch.nn.utils.skip_init(
            nn.Embedding, config.vocab_size, config.hidden_size, dtype=dtype, device=device
        )
        self.layers = nn.ModuleList(DecoderLayer(config, dtype, device) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype, device)
        self.lm_head = None
        if not config.tie_word_embeddings:
            self.lm_head = _linear(config.hidden_size, config.vocab_size, dtype, device)
        self.requires_grad_(False)  # inference only: no autograd bookkeeping even outside no_grad

        # RoPE tables for every position, in float32 on the CPU first (as HF computes inv_freq),
        # so positions only need an index_select per step.
        D = config.head_dim
        inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
        freqs = torch.arange(config.max_position_embeddings, dtype=torch.float32)[:, None] * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("rope_cos", emb.cos().to(device), persistent=False)
        sin = emb.sin()
        if torch.device(device).type == "cuda":  # rotate_half's sign folded in (see Attention)
            sin = torch.cat((-sin[:, : D // 2], sin[:, D // 2 :]), dim=-1)
        self.register_buffer("rope_sin", sin.to(device), persistent=False)

    def _plan(self, num_tokens: int, meta: AttentionMetadata, kv_caches: list[torch.Tensor]) -> _StepPlan:
        dtype = self.embed_tokens.weight.dtype
        num_rows = meta.seq_lens.shape[0]
        positions = meta.positions.long()
        cfg = self.config
        if positions.is_cuda and _triton_varlen_ok(
                dtype, cfg.head_dim, cfg.num_attention_heads // cfg.num_key_value_heads):
            # Every bf16/fp16 batch on CUDA, uniform decode (and its CUDA graphs) included:
            # the kernel reads the paged cache in place and bounds each row by its device
            # seq_len, so a graph needs no whole-row gather and no mask.
            # Fresh 16-byte-aligned int64 tensors, so the kernel's specialisation never changes.
            varlen = tuple(t if t.dtype == torch.int64 and t.is_contiguous() and not t.data_ptr() % 16
                           else t.long().contiguous().clone()
                           for t in (meta.query_start_loc, meta.seq_lens, meta.block_table))
            return _StepPlan(
                cos=self.rope_cos.index_select(0, positions).to(dtype)[:, None],
                sin=self.rope_sin.index_select(0, positions).to(dtype)[:, None],
                slots=meta.slot_mapping.long(), segments=[],
                varlen=(*varlen, int(meta.max_query_len), meta.uniform_query_len is not None))
        if meta.uniform_query_len is not None:
            query_len = meta.uniform_query_len
            if num_rows * query_len != num_tokens:
                raise ValueError(
                    f"uniform_query_len={query_len} with {num_rows} rows needs {num_rows * query_len} tokens, "
                    f"got {num_tokens}"
                )
            segments = [self._segment(meta, kv_caches, 0, num_rows, 0, num_tokens, [query_len] * num_rows)]
        elif meta.query_lens_cpu is None:
            segments = [self._segment(meta, kv_caches, 0, num_rows, 0, num_tokens, None)]
        else:
            qlens = [int(x) for x in meta.query_lens_cpu]
            if len(qlens) != num_rows or sum(qlens) != num_tokens:
                raise ValueError(f"query_lens_cpu has {len(qlens)} rows / {sum(qlens)} tokens, "
                                 f"the batch {num_rows} / {num_tokens}")
            segments, tok0 = [], 0
            for r0, r1 in row_segments(qlens):
                tok1 = tok0 + sum(qlens[r0:r1])
                segments.append(self._segment(meta, kv_caches, r0, r1, tok0, tok1, qlens[r0:r1]))
                tok0 = tok1
        return _StepPlan(
            cos=self.rope_cos.index_select(0, positions).to(dtype)[:, None],
            sin=self.rope_sin.index_select(0, positions).to(dtype)[:, None],
            slots=meta.slot_mapping.long(),
            segments=segments,
        )

    def _segment(self, meta: AttentionMetadata, kv_caches: list[torch.Tensor], r0: int, r1: int,
                 tok0: int, tok1: int, qlens: list[int] | None) -> _Segment:
        """Mask and gather indices for rows [r0, r1); qlens (host) if known, else max_query_len pads."""
        cfg = self.config
        device = self.rope_cos.device
        num_rows = r1 - r0
        positions = meta.positions[tok0:tok1].long()
        if qlens is not None and min(qlens) == max(qlens):
            query_len = qlens[0]
            flat_index = None
            query_pos = positions.view(num_rows, query_len)
        else:
            query_len = max(qlens) if qlens is not None else meta.max_query_len
            rows = meta.token_row[tok0:tok1].long() - r0
            flat_index = rows * query_len + meta.token_offset[tok0:tok1].long()
            # Padded query slots get position 0: they attend key 0 only (never empty) and are dropped.
            query_pos = positions.new_zeros(num_rows * query_len).index_copy_(0, flat_index, positions)
            query_pos = query_pos.view(num_rows, query_len)

        block_size = kv_caches[0].shape[2]
        block_table = meta.block_table[r0:r1]
        num_blocks = min(-(-meta.max_seq_len // block_size), block_table.shape[1])
        key_pos = torch.arange(num_blocks * block_size, device=device)
        # Key j is visible to a query at position p iff j <= p and j is inside the row's context.
        mask = (key_pos <= query_pos[:, :, None]) & (key_pos < meta.seq_lens[r0:r1, None, None])
        group = cfg.num_attention_heads // cfg.num_key_value_heads
        mask = mask[:, None].expand(num_rows, group, query_len, key_pos.shape[0])
        mask = mask.reshape(num_rows, 1, group * query_len, key_pos.shape[0])
        block_ids = block_table[:, :num_blocks].long().reshape(-1)
        kv_rows = bias = None
        if mask.is_cuda:
            total_blocks = kv_caches[0].shape[1]
            kv_rows = torch.cat([block_ids, block_ids + total_blocks])
            bias = torch.zeros(mask.shape, dtype=self.embed_tokens.weight.dtype, device=device)
            bias.masked_fill_(~mask, float("-inf"))
        return _Segment(tok0=tok0, tok1=tok1, num_rows=num_rows, query_len=query_len,
                        block_ids=block_ids, mask=mask, flat_index=flat_index,
                        kv_rows=kv_rows, bias=bias)

    def forward(
        self, input_ids: torch.Tensor, meta: AttentionMetadata, kv_caches: list[torch.Tensor]
    ) -> torch.Tensor:
        """Run one step over T flat tokens; writes their K/V into `kv_caches` and returns the
        final-norm hidden states [T, hidden] (the runner picks rows before `compute_logits`)."""
        plan = self._plan(input_ids.shape[0], meta, kv_caches)
        x = self.embed_tokens(input_ids)
        if plan.varlen is not None:
            return self._forward_fused(x, plan, kv_caches)
        for layer, kv_cache in zip(self.layers, kv_caches, strict=True):
            x = layer(x, plan, kv_cache)
        return self.norm(x)

    def _forward_fused(self, x: torch.Tensor, plan: _StepPlan,
                       kv_caches: list[torch.Tensor]) -> torch.Tensor:
        """The same layers on CUDA in bf16/fp16, with each residual add fused into the
        RMSNorm after it (`triton_fused`): the residual stream is carried beside the
        normalised hidden state instead of being re-added by every layer. The attention and
        MLP outputs may arrive as split-K partial sums, which that kernel finishes."""
        from .triton_fused import add_rms_norm  # lazy: Triton is CUDA-only (CPU runs never load it)
        eps = self.config.rms_norm_eps
        layers = self.layers
        h, residual = add_rms_norm(x, None, layers[0].input_layernorm.weight, eps)
        for i, (layer, kv_cache) in enumerate(zip(layers, kv_caches, strict=True)):
            attn = layer.self_attn(h, plan, kv_cache)
            h, residual = add_rms_norm(attn, residual, layer.post_attention_layernorm.weight, eps)
            nxt = layers[i + 1].input_layernorm if i + 1 < len(layers) else self.norm
            h, residual = add_rms_norm(layer.mlp(h, fused=True), residual, nxt.weight, eps)
        return h

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Float32 logits, so sampling is not done on bf16 values."""
        weight = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(hidden, weight).float()

    def _weight_targets(self) -> dict[str, torch.Tensor]:
        """HF tensor name -> the (slice of the) parameter it fills."""
        cfg = self.config
        targets = {"model.embed_tokens.weight": self.embed_tokens.weight, "model.norm.weight": self.norm.weight}
        if self.lm_head is not None:
            targets["lm_head.weight"] = self.lm_head.weight
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            attn, mlp = layer.self_attn, layer.mlp
            q, k, v = attn.qkv_proj.weight.split([attn.q_size, attn.kv_size, attn.kv_size])
            gate, up = mlp.gate_up_proj.weight.split(cfg.intermediate_size)
            targets |= {
                p + "self_attn.q_proj.weight": q,
                p + "self_attn.k_proj.weight": k,
                p + "self_attn.v_proj.weight": v,
                p + "self_attn.o_proj.weight": attn.o_proj.weight,
                p + "mlp.gate_proj.weight": gate,
                p + "mlp.up_proj.weight": up,
                p + "mlp.down_proj.weight": mlp.down_proj.weight,
                p + "input_layernorm.weight": layer.input_layernorm.weight,
                p + "post_attention_layernorm.weight": layer.post_attention_layernorm.weight,
            }
        return targets

    @torch.no_grad()
    def load_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Copy HF-named tensors in (casting to the model dtype/device). Every parameter must be
        covered exactly once, so a partial or foreign checkpoint fails loudly, naming the tensor."""
        targets = self._weight_targets()
        ignorable = ("rotary_emb.inv_freq",)  # non-persistent buffer some old checkpoints contain
        names = [n for n in state_dict.keys() if not n.endswith(ignorable)]
        if self.lm_head is None:
            names = [n for n in names if n != "lm_head.weight"]  # tied: the embedding is the head
        unexpected = [n for n in names if n not in targets]
        if unexpected:
            raise ModelLoadError(f"unexpected tensor {unexpected[0]!r} ({len(unexpected)} unexpected in all)")
        present = set(names)
        missing = [n for n in targets if n not in present]
        if missing:
            raise ModelLoadError(f"missing tensor {missing[0]!r} ({len(missing)} missing in all)")
        for name in names:
            src, dst = state_dict[name], targets[name]
            if tuple(src.shape) != tuple(dst.shape):
                raise ModelLoadError(
                    f"tensor {name!r} has shape {tuple(src.shape)}, expected {tuple(dst.shape)}"
                )
            if not src.is_floating_point():
                raise ModelLoadError(f"tensor {name!r} has dtype {src.dtype}, expected a floating point type")
            dst.copy_(src)
