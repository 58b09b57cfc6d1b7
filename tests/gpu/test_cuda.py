"""The runner on CUDA: same tokens as on CPU, CUDA graphs that replay what eager computes,
no syncs inside a V2 step, and the GPU symptoms of the fault switches.

Skipped where torch sees no CUDA device (CI has none); run on a GPU box with
`python -m pytest tests/test_cuda.py`.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from support.runner import GREEDY, RUNNER_KW, make_prompts, run

from mrbench.harness.measure.phases import PHASE_LABELS, STEP_LABEL
from mrbench.harness.measure.profiler import count_per_step, profiled
from mrbench.harness.run.targets.bundled import label_phases
from mrbench.runner_impl import LLM, SamplingParams
from mrbench.runner_impl.default_model import DEFAULT_MODEL_DIR

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA device; CI machines have none")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("kw", [
    dict(runner="v2"), dict(runner="v1"), dict(runner="v2", enforce_eager=True),
    dict(runner="v2", num_speculative_tokens=2),
    dict(runner="v2", num_speculative_tokens=2, speculative_method="draft"),
    dict(runner="v2", pd_disagg=True),
], ids=["v2", "v1", "v2-eager", "v2-ngram2", "v2-draft2", "v2-pd"])
def test_cuda_tokens_match_cpu(tiny_model_dir, tiny_draft_model_dir, prompts64, v2_greedy, kw):
    if kw.get("speculative_method") == "draft":
        kw = {**kw, "draft_model": tiny_draft_model_dir}
    assert run(tiny_model_dir, prompts64, device="cuda", **kw) == v2_greedy


@pytest.mark.parametrize("k", [0, 1, 2])
def test_cuda_graph_replay_matches_eager(tiny_model_dir, k):
    """Greedy and seeded-random tokens from graph replays (padded batch sizes included) equal
    those of the same runner run eagerly; the graphs really ran."""
    kw = {**RUNNER_KW, "max_num_seqs": 7, "max_num_batched_tokens": 64,
          "num_speculative_tokens": k}
    prompts = make_prompts(23, seed=5)
    # Different lengths: the batch shrinks one request at a time, through padded sizes.
    params = [SamplingParams(temperature=0.0 if i % 3 else 0.8, top_k=0 if i % 2 else 7,
                             max_tokens=6 + 3 * (i % 7), seed=i) for i in range(len(prompts))]
    outs = {}
    for eager in (False, True):
        llm = LLM(tiny_model_dir, device="cuda", enforce_eager=eager, **kw)
        outs[eager] = [o.token_ids for o in llm.generate(prompts, params)]
        cg = llm.cores[0].runner.cudagraphs
        if eager:
            assert cg is None
        else:
            assert cg.sizes == [1, 2, 4, 7] and sorted(cg.graphs) == cg.sizes
            served = [r.num_reqs for r in llm.step_records
                      if r.dispatch_key and r.dispatch_key[0] == "uniform_decode"]
            assert set(served) - {1, 2, 4, 7}, "no padded batch was served"
            assert cg.num_replays >= len(served) > 0
    assert outs[False] == outs[True]


def test_cuda_graph_padding_leaves_kv_alone(tiny_model_dir):
    """Padding rows write only the scratch block: a batch replayed padded to a larger size
    leaves every other KV block as the eager forward left it (up to float64 rounding of
    GEMMs of another row count; a stray padding write would be O(1) off)."""
    kw = {**RUNNER_KW, "max_num_seqs": 8}
    prompts = make_prompts(3, seed=9)
    caches = {}
    for eager in (False, True):
        llm = LLM(tiny_model_dir, device="cuda", enforce_eager=eager, **kw)
        llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=12))
        n = llm.cores[0].allocator.num_blocks
        caches[eager] = [c[:, :n].clone() for c in llm.cores[0].kv_caches]
    for a, b in zip(caches[False], caches[True]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("uniform", [0, 1, 3])
@pytest.mark.parametrize("H,KVH,D,bs", [(8, 2, 64, 16), (32, 8, 64, 16), (4, 2, 16, 8)])
def test_cuda_triton_varlen_attention_matches_reference(H, KVH, D, bs, uniform):
    """The kernel against a float32 reference, scattered blocks, GQA. uniform = 0: a mixed
    batch (decode rows, chunks with context, long prompts) through the prefill variant;
    1 or 3: a uniform-decode batch (k = 0 or 2) through the decode variant."""
    from mrbench.runner_impl.model.triton_attention import varlen_paged_attention
    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    ctxs = [0, 10, 3, 100, 0, 61]
    qlens = [uniform] * 6 if uniform else [1, 5, 37, 1, 70, 2]
    seq = [c + q for c, q in zip(ctxs, qlens)]
    maxb = max(-(-s // bs) for s in seq) + 1
    nb = len(seq) * maxb + 3
    cache = torch.randn(2, nb, bs, KVH, D, device=dev, dtype=dt)
    table = torch.randperm(nb, device=dev)[:len(seq) * maxb].view(len(seq), maxb)
    T = sum(qlens)
    q = torch.randn(T, H, D, device=dev, dtype=dt)
    qsl = torch.tensor([0] + list(np.cumsum(qlens)), device=dev)
    out = varlen_paged_attention(q, cache, qsl, torch.tensor(seq, device=dev), table,
                                 max(qlens), D ** -0.5, bool(uniform)).view(T, H, D).float()
    ref = []
    for r, (c, n) in enumerate(zip(ctxs, qlens)):
        pos = torch.arange(c + n, device=dev)
        slots = table[r, pos // bs] * bs + pos % bs
        k = cache[0].reshape(-1, KVH, D)[slots].float().repeat_interleave(H // KVH, 1)
        v = cache[1].reshape(-1, KVH, D)[slots].float().repeat_interleave(H // KVH, 1)
        qr = q[qsl[r]:qsl[r] + n].float()
        s_ = torch.einsum("qhd,khd->hqk", qr, k) * D ** -0.5
        s_ = s_.masked_fill(pos[None, None, :] > (c + torch.arange(n, device=dev))[None, :, None],
                            float("-inf"))
        ref.append(torch.einsum("hqk,khd->qhd", s_.softmax(-1), v))
    ref = torch.cat(ref)
    assert ((out - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.parametrize("qlen", [1, 3, 4])
@pytest.mark.parametrize("H,KVH,D,bs", [(32, 8, 64, 16), (8, 4, 32, 16), (4, 2, 16, 8)])
def test_cuda_rope_cache_attention_equals_rope_then_attention(H, KVH, D, bs, qlen):
    """The decode launch that applies RoPE and writes the row's K/V itself leaves the same
    cache, bit for bit, and returns the same output as `rope_and_cache` followed by the
    decode variant; rows of more tokens than one program holds are not fused."""
    from mrbench.runner_impl.model import triton_attention as ta
    from mrbench.runner_impl.model import triton_fused
    torch.manual_seed(qlen + H)
    dev, dt = "cuda", torch.bfloat16
    assert ta.fuses_rope(True, qlen, H, KVH)
    # Not fused: mixed batches, and rows of more tokens than one program holds (G = 8: 2).
    assert not ta.fuses_rope(False, 1, H, KVH) and not ta.fuses_rope(True, 3, 16, 2)
    ctxs = [0, 10, 3, 100, 47, 61, 250]
    seq = [c + qlen for c in ctxs]
    maxb = max(-(-n // bs) for n in seq) + 1
    nb = len(seq) * maxb + 3
    cache = torch.randn(2, nb, bs, KVH, D, device=dev, dtype=dt)
    table = torch.randperm(nb, device=dev)[:len(seq) * maxb].view(len(seq), maxb).contiguous()
    pos = torch.cat([torch.arange(c, c + qlen) for c in ctxs]).to(dev)
    row = torch.arange(len(seq), device=dev).repeat_interleave(qlen)
    slots = table[row, pos // bs] * bs + pos % bs
    T = len(pos)
    qkv = torch.randn(T, (H + 2 * KVH) * D, device=dev, dtype=dt)
    inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2, device=dev).float() / D))
    emb = torch.cat([pos[:, None] * inv] * 2, -1)
    cos = emb.cos().to(dt)[:, None].contiguous()
    sin = torch.cat([-emb.sin()[:, :D // 2], emb.sin()[:, D // 2:]], -1).to(dt)[:, None]
    sin = sin.contiguous()
    qsl = torch.arange(0, T + 1, qlen, device=dev)
    seq_t = torch.tensor(seq, device=dev)
    fused_cache = cache.clone()
    out = ta.rope_cache_attention(qkv, cos, sin, slots, fused_cache, qsl, seq_t, table, qlen,
                                  D ** -0.5, H)
    q = triton_fused.rope_and_cache(qkv, cos, sin, slots, cache, H, KVH, D)
    ref = ta.varlen_paged_attention(q, cache, qsl, seq_t, table, qlen, D ** -0.5, True)
    assert torch.equal(fused_cache, cache)
    assert torch.equal(out, ref)


def test_cuda_mixed_batch_triton_path_matches_sdpa_path(tiny_model_dir, monkeypatch):
    """The model's prefill/mixed path through the Triton kernel vs the PyTorch SDPA path, on
    one mixed batch (a prompt, a decode row with context, a chunk with context), bf16."""
    import mrbench.runner_impl.model.llama as llama
    from mrbench.runner_impl.model.loader import load_model
    model, cfg = load_model(tiny_model_dir, torch.bfloat16, "cuda")
    bs, maxb = 8, 12
    caches = llama.allocate_kv_cache(cfg, 40, bs, torch.bfloat16, "cuda")
    for c in caches:
        c.normal_()
    qlens, ctxs = [5, 1, 33], [0, 20, 7]
    table = torch.arange(3 * maxb, device="cuda").view(3, maxb).flip(1).contiguous()
    pos = torch.cat([torch.arange(c, c + n) for c, n in zip(ctxs, qlens)]).cuda()
    row = torch.cat([torch.full((n,), r) for r, n in enumerate(qlens)]).cuda()
    meta = llama.AttentionMetadata(
        query_start_loc=torch.tensor([0, 5, 6, 39], device="cuda"),
        seq_lens=torch.tensor([c + n for c, n in zip(ctxs, qlens)], device="cuda"),
        block_table=table, slot_mapping=table[row, pos // bs] * bs + pos % bs, token_row=row,
        token_offset=torch.cat([torch.arange(n) for n in qlens]).cuda(), positions=pos,
        max_query_len=33, max_seq_len=40, query_lens_cpu=qlens)
    ids = torch.randint(3, cfg.vocab_size, (39,), device="cuda")
    out = {}
    for use_triton in (True, False):
        monkeypatch.setattr(llama, "_triton_varlen_ok", lambda *a: use_triton)
        with torch.inference_mode():
            out[use_triton] = model(ids, meta, [c.clone() for c in caches]).float()
    assert ((out[True] - out[False]).norm() / out[False].norm()).item() < 2e-2


def v2_syncs_per_step(model_dir, faults=()) -> list[dict]:
    """Per profiled serving step (after warmup, graphs captured): mrbench's profiler
    collector's counts, from raw Kineto events including CUDA runtime calls."""
    llm = LLM(model_dir, device="cuda", num_speculative_tokens=2, faults=faults,
              **{**RUNNER_KW, "dtype": "float32"})
    label_phases(llm)                    # the harness's step and phase ranges
    prompts = make_prompts(16, seed=4)
    llm.generate(prompts[:4], SamplingParams(temperature=0, max_tokens=4))   # not counted
    replays0 = llm.cores[0].runner.cudagraphs.num_replays
    with profiled("cuda") as prof:
        llm.generate(prompts, SamplingParams(temperature=0, max_tokens=16))
    rows = count_per_step(prof.events, STEP_LABEL, PHASE_LABELS, "cuda")
    assert len(rows) > 10
    assert llm.cores[0].runner.cudagraphs.num_replays > replays0      # graphs were in the pass
    return rows


def test_cuda_v2_step_has_no_sync(tiny_model_dir):
    rows = v2_syncs_per_step(tiny_model_dir)
    assert [r["syncs_hot"] for r in rows] == [0] * len(rows)


def test_cuda_seq_lens_sync_fault_syncs_every_step(tiny_model_dir):
    rows = v2_syncs_per_step(tiny_model_dir, faults=["seq-lens-sync"])
    assert min(r["syncs_prepare"] for r in rows) >= 1
    # A real stream synchronisation from the device->host copy of seq_lens, every step.
    assert min(r["cudaStreamSynchronize"] for r in rows) >= 1


def spike_probe(faults: str, prompt_len: int, triton_cache: Path) -> dict:
    """Runs in a fresh process with an empty Triton cache, as a fresh deployment does: CUDA
    kernel loading, Triton's compilation and allocator growth are per process (or per
    cache), so an earlier test or probe would already have paid for them."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_gpu.py"), "--probe-json", "spike",
           str(DEFAULT_MODEL_DIR), faults, str(prompt_len)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT),
                            "TRITON_CACHE_DIR": str(triton_cache)})
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_cuda_warmup_short_prefill_first_prefill_spike(tmp_path):
    """k = 1: the faulty warmup's 2-token 'prefill' is a uniform-decode batch (a graph
    replay), so the prefill variant of the Triton attention kernel (the decode graphs use
    the other one) is first launched, and compiled, by serving's first prefill. Measured as
    first prefill / median of the later ones, each in its own process with an empty Triton
    cache."""
    clean = spike_probe("", 48, tmp_path / "clean")
    fault = spike_probe("warmup-short-prefill", 48, tmp_path / "fault")
    assert "mixed" in clean["warmup_kinds"] and "mixed" not in fault["warmup_kinds"]
    assert fault["ratio"] >= 5.0, fault
    assert fault["ratio"] >= 3 * clean["ratio"], (clean, fault)


def test_cuda_async_scheduling_tokens_equal_sync(tiny_model_dir):
    """Async scheduling on a real stream: two pinned staging sets and output buffers, the
    next step's inputs from the device truth the previous one updates; float64, so the
    tokens must equal the synchronous engine's exactly. Graphs replay in both."""
    prompts = make_prompts(24, seed=7)
    sp = SamplingParams(temperature=0.0, max_tokens=20)
    outs = {}
    for use_async in (False, True):
        llm = LLM(tiny_model_dir, device="cuda", async_scheduling=use_async, **RUNNER_KW)
        outs[use_async] = [o.token_ids for o in llm.generate(prompts, sp)]
        assert llm.cores[0].runner.cudagraphs.num_replays > 0
        assert llm.cores[0].runner.step_graphs.num_replays > 0
    assert outs[True] == outs[False]


def test_cuda_step_graphs_equal_eager_glue(tiny_model_dir):
    """prepare's device half and post_update replayed from graphs (k = 0) against the same
    engine with them off: identical tokens and identical device state after serving."""
    prompts = make_prompts(24, seed=8)
    sp = SamplingParams(temperature=0.0, max_tokens=20)
    res = {}
    for graphs in (True, False):
        llm = LLM(tiny_model_dir, device="cuda", **RUNNER_KW)
        runner = llm.cores[0].runner
        if not graphs:
            runner.step_graphs = None
        toks = [o.token_ids for o in llm.generate(prompts, sp)]
        st = runner.state
        res[graphs] = (toks, st.all_token_ids.clone(), st.total_len.clone(),
                       st.num_computed_tokens.clone(), st.last_sampled_tokens.clone())
        if graphs:
            assert runner.step_graphs.num_replays > 0
    assert res[True][0] == res[False][0]
    for a, b in zip(res[True][1:], res[False][1:]):
        assert torch.equal(a, b)


def test_cuda_fused_kernels_match_the_pytorch_ops():
    """triton_fused against the PyTorch ops they replace (the float32/float64 CUDA path's
    ops, in bf16): RoPE and the cache writes bit for bit, add + RMSNorm and SiLU * up
    within one bf16 rounding."""
    import torch.nn.functional as F

    from mrbench.runner_impl.model import triton_fused
    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    T, H, KVH, D, nblk, bs = 37, 32, 8, 64, 20, 16
    qkv = torch.randn(T, (H + 2 * KVH) * D, device=dev, dtype=dt)
    pos = torch.randint(0, 300, (T,), device=dev)
    inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2, device=dev).float() / D))
    emb = torch.cat([pos[:, None] * inv] * 2, -1)
    cos = emb.cos().to(dt)[:, None]
    sin = torch.cat([-emb.sin()[:, :D // 2], emb.sin()[:, D // 2:]], -1).to(dt)[:, None]
    slots = torch.randperm(nblk * bs, device=dev)[:T]
    cache = torch.zeros(2, nblk, bs, KVH, D, device=dev, dtype=dt)
    q = triton_fused.rope_and_cache(qkv, cos, sin, slots, cache, H, KVH, D)
    qk = qkv[:, :(H + KVH) * D].view(T, H + KVH, D)
    ref = torch.addcmul(qk * cos, qk.roll(D // 2, -1), sin)
    assert torch.equal(q, ref[:, :H])
    flat = cache.view(2, -1, KVH, D)
    assert torch.equal(flat[0][slots], ref[:, H:])
    assert torch.equal(flat[1][slots], qkv[:, (H + KVH) * D:].view(T, KVH, D))
    assert int((flat.abs().sum((-1, -2)) > 0).sum()) == 2 * T      # nothing else written

    x, res = (torch.randn(T, 2048, device=dev, dtype=dt) for _ in range(2))
    w = torch.randn(2048, device=dev, dtype=dt)
    out, res_out = triton_fused.add_rms_norm(x, res, w, 1e-5)
    assert torch.equal(res_out, res + x)
    torch.testing.assert_close(out, F.rms_norm(res + x, (2048,), w, 1e-5), rtol=1.6e-2, atol=1e-2)
    out0, same = triton_fused.add_rms_norm(x, None, w, 1e-5)
    assert same is x
    torch.testing.assert_close(out0, F.rms_norm(x, (2048,), w, 1e-5), rtol=1.6e-2, atol=1e-2)

    gu = torch.randn(T, 2 * 3000, device=dev, dtype=dt)
    torch.testing.assert_close(triton_fused.silu_and_mul(gu),
                               F.silu(gu[:, :3000]) * gu[:, 3000:], rtol=1.6e-2, atol=1e-2)


@pytest.mark.parametrize("N,K,split_k,gated", [(3072, 2048, 1, False), (2048, 2048, 2, False),
                                               (2048, 8192, 2, False), (8192, 2048, 1, True),
                                               (768, 256, 1, True)])
def test_cuda_skinny_gemm_matches_float64_reference(N, K, split_k, gated):
    """triton_gemm.linear against float64 (bf16 operands: relative error under 1e-2), with
    every output written; the gated epilogue against SiLU(gate) * up of the float64
    products; split-K partials finished by add_rms_norm equal rounding their sum once."""
    import torch.nn.functional as F

    from mrbench.runner_impl.model import triton_fused, triton_gemm
    torch.manual_seed(N + K)
    dev, dt = "cuda", torch.bfloat16
    w = torch.randn(2 * N if gated else N, K, device=dev, dtype=dt) * K ** -0.5
    for T in (1, 7, 64):
        x = torch.randn(T, K, device=dev, dtype=dt)
        assert triton_gemm.applies(x, w, split_k, gated)
        got = triton_gemm.linear(x, w, split_k=split_k, gated=gated)
        assert got.shape == ((split_k, T, N) if split_k > 1 else (T, N))
        assert torch.isfinite(got).all()
        ref = F.linear(x.double(), w.double())
        if gated:
            ref = F.silu(ref[:, :N]) * ref[:, N:]
        total = got.double().sum(0) if split_k > 1 else got.double()
        assert ((total - ref).norm() / ref.norm()).item() < 1e-2
        if split_k > 1:
            res = torch.randn(T, N, device=dev, dtype=dt)
            nw = torch.randn(N, device=dev, dtype=dt)
            out, res_out = triton_fused.add_rms_norm(got, res, nw, 1e-5)
            assert torch.equal(res_out, got.sum(0).to(dt) + res)
            torch.testing.assert_close(out, F.rms_norm(res_out, (N,), nw, 1e-5),
                                       rtol=1.6e-2, atol=1e-2)
    # Shapes the tiling does not divide fall back to cuBLAS (+ silu_and_mul), same function.
    w2 = torch.randn(2 * 100 if gated else 100, K, device=dev, dtype=dt) * K ** -0.5
    x = torch.randn(5, K, device=dev, dtype=dt)
    assert not triton_gemm.applies(x, w2, split_k, gated)
    assert triton_gemm.linear(x, w2, split_k=split_k, gated=gated).shape == (5, 100)


def test_cuda_skinny_gemm_rows_independent_of_batch_size():
    """A row's result is bit-identical whether it is computed alone or among 64 rows, and
    more than 64 rows (prefill) go to cuBLAS."""
    from mrbench.runner_impl.model import triton_gemm
    torch.manual_seed(1)
    w = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16) * 0.02
    x = torch.randn(64, 2048, device="cuda", dtype=torch.bfloat16)
    full = triton_gemm.linear(x, w, split_k=2)
    for i in (0, 13, 63):
        assert torch.equal(triton_gemm.linear(x[i:i + 1], w, split_k=2)[:, 0], full[:, i])
    assert not triton_gemm.applies(torch.randn(65, 2048, device="cuda", dtype=torch.bfloat16), w)


def test_cuda_pdl_changes_no_token(monkeypatch):
    """Programmatic dependent launch only lets kernels start early; each waits for its
    predecessor before touching memory. So the bundled model (every Triton path: decode
    GEMMs, split-K, the gated epilogue, RoPE inside decode attention) must give the same
    bf16 tokens, bit for bit, with PDL on and off; a missing wait would show as a race."""
    from mrbench.runner_impl.model import triton_base
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("PDL needs a Hopper or later GPU")
    prompts = make_prompts(64, seed=11, lo=3, hi=60)
    sp = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    outs = {}
    try:
        for flag in ("1", "0"):
            monkeypatch.setenv("MRBENCH_TRITON_PDL", flag)
            triton_base.pdl.cache_clear()
            assert triton_base.pdl() is (flag == "1")
            llm = LLM(DEFAULT_MODEL_DIR, device="cuda", dtype="bfloat16", max_num_seqs=64,
                      max_num_batched_tokens=512, async_scheduling=True)
            outs[flag] = [o.token_ids for o in llm.generate(prompts, sp)]
            assert llm.cores[0].runner.cudagraphs.num_replays > 0
            del llm
    finally:  # later tests read the flag afresh, whatever happened here
        monkeypatch.delenv("MRBENCH_TRITON_PDL")
        triton_base.pdl.cache_clear()
    assert outs["1"] == outs["0"]


def test_cuda_slow_step_ruler_spins_on_the_gpu_and_keeps_the_tokens(tiny_model_dir, prompts64,
                                                                   v2_greedy):
    """slow-step:50 on CUDA: the spin kernel's clock was read from completed events (no
    waits of its own); the ruler's base for the commonest decode class is the engine's
    recorded step less the ruler's part (so the step grows by half of it, not by half of
    the forward's GPU time); and the tokens are the clean run's."""
    llm = LLM(tiny_model_dir, **{**RUNNER_KW, "device": "cuda", "faults": ["slow-step:50"]})
    out = [o.token_ids for o in llm.generate(prompts64, GREEDY)]
    core = llm.cores[0]
    slow = core.runner.slow_step
    assert slow is not None and slow._cycles_per_ms and slow._cycles_per_ms > 0
    keys = [r.dispatch_key for r in core.step_records if r.dispatch_key[:1] == ("uniform_decode",)]
    key = max(set(keys), key=keys.count)
    steps = sorted((r.t_end - r.t_start) * 1e3 for r in core.step_records
                   if r.dispatch_key == key)
    assert slow.slowed_steps >= 10 and len(steps) >= 10
    median = steps[len(steps) // 2]
    assert 0.5 * median / 1.5 < slow.base_ms[key] < 1.5 * median / 1.5
    assert out == v2_greedy
