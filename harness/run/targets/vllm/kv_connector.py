"""The KV connector the vllm target's PD pair uses: vLLM's own `ExampleConnector`, measured.

vLLM imports this module by name (`kv_connector_module_path`) inside the engine's process,
so it may import vLLM at the top; nothing else in mrbench imports it.

Why vLLM's example connector and not a transport of our own: it is the connector vLLM ships
for one-machine disaggregation (its `disaggregated-prefill-v1` example), it needs nothing the
kit lacks, and it moves the KV through vLLM's own connector API - scheduler-side matching,
block allocation for external tokens, the worker-side load before the forward and the
layer-wise save inside it - which is the code path every production connector (NIXL,
Mooncake, LMCache) plugs into. The prefill engine writes each prompt's KV (whole blocks, the
last prompt token excluded) to files under a shared directory; the decode engine finds them,
loads them into the blocks it allocated and computes only the prompt's tail.

What the subclass adds, and nothing else:
- Under tensor parallelism each rank stores and loads its own file per layer (the example
  names one file per layer, so the ranks' shards would overwrite each other).
- The prefill engine (`kv_producer`) never loads: vLLM's example also matches on the
  producer, so a prompt seen before would skip its prefill there, and a repeated wave would
  time a prefill that did not run.
- A prompt matches only on the key its KV is stored and loaded under. The example stores and
  loads a prompt's files under the hash of its first `align(len)` tokens but looks them up
  under its first `align(len - 1)` (it expects the decode prompt to carry one token more).
  The two differ when `len % block_size == 1`, and then the lookup lands on the files of a
  shorter prompt that shares the prefix: the producer skips the store, the consumer tries to
  load files that were never written and the step fails ("No such file ... safetensors";
  a Mooncake conversation trace, whose turns extend earlier turns, hit it in nightly's PD
  replay). Where no such prompt exists, the lookup misses and the decode engine recomputes
  the whole prompt instead (counted as `pd_kv_recomputed`).
- Measurement: each worker-side call (load before the forward, save per layer, the wait
  after it) is timed by `kv_timing` (its profiler range, its host seconds, vLLM's sync
  checker told the example's copies through host files are deliberate). The scheduler side
  keeps which requests this step loads or stores and how many tokens each (`last_step`),
  so the session can give each request its share of the step's transfer time.
"""
from __future__ import annotations

import os
from typing import Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import (
    ExampleConnector,
    align_to_block_size,
)
from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

from .kv_timing import timed


class MrbenchExampleConnector(ExampleConnector):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self._kv_transfer_config
        self.is_producer_only = bool(cfg.is_kv_producer and not cfg.is_kv_consumer)
        # the engine's tensor-parallel ranks: each stores and loads its own shard's files
        self._tp_ranks = self._vllm_config.parallel_config.tensor_parallel_size
        # scheduler side: {request id: tokens} loaded / stored by the step just scheduled
        self.last_step: dict[str, dict[str, int]] = dict(load={}, store={})

    # -- scheduler side ------------------------------------------------------------------
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int
                                   ) -> tuple[int | None, bool]:
        if self.is_producer_only:
            return 0, False
        return super().get_num_new_matched_tokens(request, num_computed_tokens)

    def build_connector_meta(self, scheduler_output: Any) -> Any:
        loading = set(self._requests_need_load)          # cleared by the call below
        step: dict[str, dict[str, int]] = dict(load={}, store={})
        for r in scheduler_output.scheduled_new_reqs:
            tokens = list(r.prompt_token_ids or [])
            n = align_to_block_size(len(tokens), self._block_size)   # the blocks that move
            if r.req_id in loading:
                step["load"][r.req_id] = n
            elif not self._found_match_for_prompt(tokens, [f.identifier for f in r.mm_features]):
                step["store"][r.req_id] = n              # the example's rule: not on disk yet
        for rid in loading - set(step["load"]):          # resumed after a preemption
            step["load"][rid] = 0
        self.last_step = step
        return super().build_connector_meta(scheduler_output)

    def _found_match_for_prompt(self, prompt_token_ids: list[int], mm_hashes: list[str]
                                ) -> bool:
        """Whether this prompt's KV is on disk, looked up under the key it is stored and
        loaded under (`ReqMeta.make_meta`: the first `align_to_block_size(len)` tokens)."""
        n = align_to_block_size(len(prompt_token_ids), self._block_size)
        folder = self._generate_foldername_debug(torch.tensor(prompt_token_ids)[:n],
                                                 mm_hashes, create_folder=False)
        return os.path.exists(folder)

    # -- worker side ---------------------------------------------------------------------
    def _generate_filename_debug(self, layer_name: str, token_ids: torch.Tensor,
                                 mm_hashes: list[str]) -> str:
        """The example's file for a layer's KV, one per tensor-parallel rank: each rank
        holds its own heads of a layer, and under the example's one name per layer the
        ranks would write over each other's shard (the decode engine must then run the
        same tensor-parallel size, which a PD pair's two engines do)."""
        path = super()._generate_filename_debug(layer_name, token_ids, mm_hashes)
        if self._tp_ranks == 1:
            return path
        stem, ext = os.path.splitext(path)
        return f"{stem}.tp{get_tensor_model_parallel_rank()}-of-{self._tp_ranks}{ext}"

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        timed(super().start_load_kv, forward_context, **kwargs)

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any,
                      **kwargs: Any) -> None:
        timed(super().save_kv_layer, layer_name, kv_layer, attn_metadata, **kwargs)

    def wait_for_save(self) -> None:
        timed(super().wait_for_save)
