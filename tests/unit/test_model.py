"""Our Llama vs transformers' on the tiny random model, paged attention over mixed batches,
the no-host-sync guarantee of forward, and the loader's error messages."""

import json
import math
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from support.models import tiny_llama

from mrbench.runner_impl.errors import ModelLoadError
from mrbench.runner_impl.model import (
    AttentionMetadata,
    LlamaConfig,
    allocate_kv_cache,
    load_model,
    load_tokenizer,
)

ATOL = 1e-4
SEQ_LENS = (13, 9, 21, 5)


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    model, _ = load_model(tiny_model_dir, torch.float32, "cpu")
    return model


@pytest.fixture(scope="module")
def seqs(model):
    gen = torch.Generator().manual_seed(1234)
    return [torch.randint(0, model.config.vocab_size, (n,), generator=gen) for n in SEQ_LENS]


def hf_logits(model_dir, seqs):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        return [hf(s[None]).logits[0] for s in seqs]


@pytest.fixture(scope="module")
def reference(tiny_model_dir, seqs):
    """HF logits of every position of every sequence, the ground truth."""
    return hf_logits(tiny_model_dir, seqs)


class Pages:
    """Test-side block manager: every sequence gets blocks from a random permutation of the cache,
    so neighbouring positions live in far-apart blocks."""

    def __init__(self, seq_lens, block_size, seed=0):
        self.block_size = block_size
        need = [math.ceil(n / block_size) for n in seq_lens]
        self.num_blocks = sum(need) + 3
        perm = torch.randperm(self.num_blocks, generator=torch.Generator().manual_seed(seed)).tolist()
        self.tables, start = [], 0
        for n in need:
            self.tables.append(perm[start : start + n])
            start += n
        self.spare = perm[start:]  # never written: table padding points here (masked garbage)

    def meta(self, chunks, uniform=None, slack=3, segmented=False):
        """chunks: [(seq_index, start_pos, num_tokens)] per row, rows in batch order."""
        bs = self.block_size
        width = max(len(t) for t in self.tables) + 1  # wider than needed: exercises the nblk clamp
        positions, rows, offsets, slots, seq_lens, table, qsl = [], [], [], [], [], [], [0]
        for r, (seq, start, n) in enumerate(chunks):
            blocks = self.tables[seq]
            for i in range(n):
                p = start + i
                positions.append(p)
                rows.append(r)
                offsets.append(i)
                slots.append(blocks[p // bs] * bs + p % bs)
            seq_lens.append(start + n)
            table.append(blocks + self.spare[:1] * (width - len(blocks)))
            qsl.append(qsl[-1] + n)
        long = lambda x: torch.tensor(x, dtype=torch.long)  # noqa: E731
        return AttentionMetadata(
            query_start_loc=torch.tensor(qsl, dtype=torch.int32),
            seq_lens=long(seq_lens),
            block_table=torch.tensor(table, dtype=torch.int32),
            slot_mapping=long(slots),
            token_row=long(rows),
            token_offset=long(offsets),
            positions=long(positions),
            max_query_len=max(n for _, _, n in chunks),
            max_seq_len=max(seq_lens) + slack,  # only an upper bound
            uniform_query_len=uniform,
            query_lens_cpu=[n for _, _, n in chunks] if segmented else None,
        )


def run_step(model, seqs, pages, caches, chunks, uniform=None, segmented=False):
    ids = torch.cat([seqs[s][start : start + n] for s, start, n in chunks])
    meta = pages.meta(chunks, uniform, segmented=segmented)
    with torch.inference_mode():
        return model.compute_logits(model(ids, meta, caches))


def check_step(logits, reference, chunks):
    expected = torch.cat([reference[s][start : start + n] for s, start, n in chunks])
    torch.testing.assert_close(logits, expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("block_size", [4, 16])
def test_single_prefill_row_matches_hf(model, seqs, reference, block_size):
    pages = Pages(SEQ_LENS, block_size)
    caches = allocate_kv_cache(model.config, pages.num_blocks, block_size, torch.float32, "cpu")
    for i, n in enumerate(SEQ_LENS):
        chunks = [(i, 0, n)]
        check_step(run_step(model, seqs, pages, caches, chunks), reference, chunks)


@pytest.mark.parametrize("segmented", [False, True], ids=["one-grid", "segmented"])
@pytest.mark.parametrize("block_size", [4, 16])
def test_chunked_prefill_mixed_with_decode_matches_hf(model, seqs, reference, block_size, segmented):
    pages = Pages(SEQ_LENS, block_size, seed=block_size)
    caches = allocate_kv_cache(model.config, pages.num_blocks, block_size, torch.float32, "cpu")
    steps = [
        [(0, 0, 6), (1, 0, 8), (2, 0, 12), (3, 0, 4)],  # first chunks; segmented: short|long|short
        [(2, 12, 5), (1, 8, 1), (0, 6, 7), (3, 4, 1)],  # rows reordered; two decode rows
        [(2, 17, 4)],  # last chunk, reading 17 cached positions
    ]
    for chunks in steps:
        check_step(run_step(model, seqs, pages, caches, chunks, segmented=segmented), reference, chunks)


def test_row_segments_split_short_from_long_rows():
    from mrbench.runner_impl.model.llama import SHORT_QUERY, row_segments
    assert row_segments([1, 1, 3]) == [(0, 3)]
    assert row_segments([1, 1, SHORT_QUERY + 1, 40, 2]) == [(0, 2), (2, 4), (4, 5)]
    assert row_segments([]) == []


def test_query_lens_must_match_the_batch(model, seqs):
    pages = Pages(SEQ_LENS, 4)
    caches = allocate_kv_cache(model.config, pages.num_blocks, 4, torch.float32, "cpu")
    chunks = [(0, 0, 6), (2, 0, 12)]
    ids = torch.cat([seqs[s][start : start + n] for s, start, n in chunks])
    meta = pages.meta(chunks, segmented=True)
    meta.query_lens_cpu = [6, 11]
    with pytest.raises(ValueError, match="query_lens_cpu"), torch.inference_mode():
        model(ids, meta, caches)


@pytest.mark.parametrize("query_len", [1, 3])
def test_uniform_path_matches_general_path(model, seqs, reference, query_len):
    block_size = 4
    pages = Pages(SEQ_LENS, block_size, seed=7)
    caches = allocate_kv_cache(model.config, pages.num_blocks, block_size, torch.float32, "cpu")
    prefix = [n - query_len for n in SEQ_LENS]
    run_step(model, seqs, pages, caches, [(i, 0, p) for i, p in enumerate(prefix)])
    chunks = [(i, p, query_len) for i, p in enumerate(prefix)]
    general = run_step(model, seqs, pages, caches, chunks)
    # Same K/V gets rewritten to the same slots, so the cache state is identical for both calls.
    uniform = run_step(model, seqs, pages, caches, chunks, uniform=query_len)
    check_step(general, reference, chunks)
    torch.testing.assert_close(uniform, general, atol=1e-6, rtol=0)

    # The uniform path must not depend on the per-token row/offset scatter at all.
    ids = torch.cat([seqs[s][start : start + n] for s, start, n in chunks])
    meta = pages.meta(chunks, uniform=query_len)
    meta.token_row = torch.zeros_like(meta.token_row)
    meta.token_offset = torch.zeros_like(meta.token_offset)
    with torch.inference_mode():
        torch.testing.assert_close(model.compute_logits(model(ids, meta, caches)), general, atol=1e-6, rtol=0)


def test_forward_has_no_host_sync(model, seqs):
    from torch.profiler import ProfilerActivity, profile

    block_size = 4
    pages = Pages(SEQ_LENS, block_size)
    caches = allocate_kv_cache(model.config, pages.num_blocks, block_size, torch.float32, "cpu")
    batches = [
        ([(0, 0, 6), (1, 0, 8), (2, 0, 12), (3, 0, 4)], None),
        ([(2, 12, 5), (1, 8, 1), (0, 6, 7)], None),
        ([(0, 13 - 2, 2), (2, 21 - 2, 2)], 2),
    ]
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for chunks, uniform in batches:
            run_step(model, seqs, pages, caches, chunks, uniform)
    names = {e.name for e in prof.events()}
    assert "aten::scaled_dot_product_attention" in names  # the profiler did see forward
    assert not names & {"aten::_local_scalar_dense", "aten::item", "aten::nonzero", "aten::is_nonzero"}


def test_tied_embeddings_match_hf(tmp_path):
    path = tiny_llama(tmp_path / "tied", num_hidden_layers=1, tie_word_embeddings=True, seed=3)
    assert not any(k.startswith("lm_head") for k in load_file(path / "model.safetensors"))
    model, config = load_model(path, torch.float32, "cpu")
    assert config.tie_word_embeddings
    seq = torch.arange(11) % config.vocab_size
    pages = Pages([11], 4)
    caches = allocate_kv_cache(config, pages.num_blocks, 4, torch.float32, "cpu")
    check_step(run_step(model, [seq], pages, caches, [(0, 0, 11)]), hf_logits(path, [seq]), [(0, 0, 11)])


def test_sharded_checkpoint_loads(tiny_model_dir, tmp_path, model):
    path = tmp_path / "sharded"
    shutil.copytree(tiny_model_dir, path)
    tensors = load_file(path / "model.safetensors")
    (path / "model.safetensors").unlink()
    names = sorted(tensors)
    weight_map = {}
    for shard, part in enumerate((names[::2], names[1::2])):
        file = f"model-{shard + 1:05d}-of-00002.safetensors"
        save_file({n: tensors[n] for n in part}, path / file)
        weight_map |= {n: file for n in part}
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    sharded, _ = load_model(path, torch.float32, "cpu")
    for (name, a), b in zip(model.state_dict().items(), sharded.state_dict().values()):
        assert torch.equal(a, b), name


def test_draft_model_shares_tokenizer(tiny_model_dir, tiny_draft_model_dir):
    assert (tiny_model_dir / "tokenizer.json").read_bytes() == (tiny_draft_model_dir / "tokenizer.json").read_bytes()
    _, config = load_model(tiny_draft_model_dir, torch.float32, "cpu")
    assert (config.num_hidden_layers, config.hidden_size, config.num_key_value_heads) == (1, 32, 1)


# ---------------------------------------------------------------------------- loader errors


def _copy(tiny_model_dir, tmp_path):
    path = tmp_path / "model"
    shutil.copytree(tiny_model_dir, path)
    return path


def _edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def test_error_missing_dir(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(tmp_path / "nope", torch.float32, "cpu")


def test_error_not_a_dir(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ModelLoadError, match="is not a directory"):
        load_model(tmp_path / "file", torch.float32, "cpu")


def _write_config(text):
    return lambda path: (path / "config.json").write_text(text)


@pytest.mark.parametrize("spoil, error", [
    (lambda path: (path / "config.json").unlink(), "config.json not found"),
    (_write_config('{\n  "vocab_size": 96,\n  oops\n}'),
     r"config.json is not valid JSON \(line 3\)"),
    (lambda path: (path / "model.safetensors").unlink(), "no weights"),
], ids=["missing-config", "malformed-config", "missing-weights"])
def test_error_a_missing_or_malformed_file(tiny_model_dir, tmp_path, spoil, error):
    path = _copy(tiny_model_dir, tmp_path)
    spoil(path)
    with pytest.raises(ModelLoadError, match=error):
        load_model(path, torch.float32, "cpu")


def test_error_wrong_tensor_shape(tiny_model_dir, tmp_path):
    path = _copy(tiny_model_dir, tmp_path)
    tensors = load_file(path / "model.safetensors")
    tensors["model.layers.1.self_attn.k_proj.weight"] = torch.zeros(8, 64)
    save_file(tensors, path / "model.safetensors")
    with pytest.raises(ModelLoadError, match=r"'model.layers.1.self_attn.k_proj.weight' has shape \(8, 64\)"):
        load_model(path, torch.float32, "cpu")


def test_error_missing_and_unexpected_tensor(tiny_model_dir, tmp_path):
    path = _copy(tiny_model_dir, tmp_path)
    tensors = load_file(path / "model.safetensors")
    del tensors["model.norm.weight"]
    save_file(tensors, path / "model.safetensors")
    with pytest.raises(ModelLoadError, match="missing tensor 'model.norm.weight'"):
        load_model(path, torch.float32, "cpu")
    tensors["model.norm.weight"] = torch.ones(64)
    tensors["model.layers.9.mlp.up_proj.weight"] = torch.ones(1)
    save_file(tensors, path / "model.safetensors")
    with pytest.raises(ModelLoadError, match="unexpected tensor 'model.layers.9.mlp.up_proj.weight'"):
        load_model(path, torch.float32, "cpu")


def test_error_unsupported_model_type(tiny_model_dir, tmp_path):
    path = _copy(tiny_model_dir, tmp_path)
    _edit_config(path, model_type="gpt2", architectures=["GPT2LMHeadModel"])
    with pytest.raises(ModelLoadError, match="config.json: unsupported model_type 'gpt2'"):
        load_model(path, torch.float32, "cpu")


BASE_CONFIG = dict(
    model_type="llama",
    vocab_size=96,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    rms_norm_eps=1e-6,
    max_position_embeddings=512,
)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"attention_bias": True}, "attention_bias"),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_type 'llama3'"),
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}}, "rope_type 'yarn'"),
        ({"architectures": ["LlamaForSequenceClassification"]}, "architectures"),
        ({"vocab_size": None}, "'vocab_size'"),
        ({"num_key_value_heads": 3}, "not a multiple"),
    ],
)
def test_config_rejects(changes, message):
    d = {k: v for k, v in (BASE_CONFIG | changes).items() if v is not None}
    with pytest.raises(ModelLoadError, match=message):
        LlamaConfig.from_hf_dict(d)


def test_config_defaults_and_rope_parameters():
    c = LlamaConfig.from_hf_dict(BASE_CONFIG | {"eos_token_id": [2, 5], "rope_parameters": {"rope_theta": 5e5}})
    assert (c.num_key_value_heads, c.head_dim, c.rope_theta, c.eos_token_id) == (4, 16, 5e5, (2, 5))
    assert LlamaConfig.from_hf_dict(BASE_CONFIG | {"eos_token_id": 2}).rope_theta == 10000.0


# ---------------------------------------------------------------------------- tokenizer


def test_tokenizer_round_trip_and_matches_auto_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = load_tokenizer(tiny_model_dir)
    text = "Hello, world!\nThe 3 quick foxes (42) jump."
    ids = tok.encode(text)
    assert ids[0] == tok.bos_token_id == 1
    assert tok.decode(ids) == text
    assert tok.eos_token_ids == (2,) and tok.vocab_size == 96
    hf = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert hf(text).input_ids == ids
    assert hf.eos_token_id == 2 and hf.bos_token_id == 1


def test_tokenizer_errors(tiny_model_dir, tmp_path):
    path = _copy(tiny_model_dir, tmp_path)
    (path / "tokenizer.json").write_text("{ not json")
    with pytest.raises(ModelLoadError, match="tokenizer.json could not be parsed"):
        load_tokenizer(path)
    (path / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadError, match="tokenizer.json not found"):
        load_tokenizer(path)
