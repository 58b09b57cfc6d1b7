"""The MRv2-style model runner: persistent slots, device truth, host mirror, no syncs.

One step = prepare -> forward -> sample -> postprocess, each under a profiler label
(`mrbench::<phase>`), then one device-to-host copy of the sampled tokens in `output`,
outside the measured phases. On CUDA, uniform-decode forwards replay CUDA graphs captured
at warmup (`cuda_graph.py`); everything else runs eagerly.
"""
from __future__ import annotations

import torch
from torch.profiler import record_function

from ..config import EngineConfig
from ..engine.outputs import ModelRunnerOutput, SchedulerOutput
from ..model.llama import LlamaForCausalLM
from ..sampler import sample
from .block_table import BlockTables
from .cuda_graph import CudaGraphManager
from .input_batch import InputBatch, prepare_inputs
from .rejection_sampler import count_sampled, rejection_sample
from .sampler import SamplingState
from .spec_decode import DraftModelProposer, NgramProposer
from .staging import PinnedStaging
from .states import RequestState


class ModelRunnerV2:
    name = "v2"

    def __init__(self, cfg: EngineConfig, model: LlamaForCausalLM, kv_caches: list[torch.Tensor],
                 max_model_len: int, max_blocks_per_req: int,
                 draft: tuple[LlamaForCausalLM, list[torch.Tensor]] | None = None) -> None:
        self.cfg, self.model, self.kv_caches = cfg, model, kv_caches
        self.k = cfg.num_speculative_tokens
        self.faults = cfg.faults
        dev = cfg.torch_device
        n = cfg.max_num_seqs
        self.staging = PinnedStaging(dev)
        poison = model.config.vocab_size - 1 if cfg.debug_poison_freed_slots else None
        self.state = RequestState(n, max_model_len, self.k, dev, self.faults, self.staging, poison)
        self.block_tables = BlockTables(n, max_blocks_per_req, cfg.block_size, dev, self.staging)
        self.sampling = SamplingState(n, dev, self.staging)
        self.proposer: NgramProposer | DraftModelProposer | None = None
        if self.k and cfg.speculative_method == "ngram":
            self.proposer = NgramProposer(self.k, cfg.ngram_min, cfg.ngram_max)
        elif self.k:
            assert draft is not None
            self.proposer = DraftModelProposer(draft[0], draft[1], self.k, n,
                                               model.config.vocab_size, dev)
        # Pinned host buffer for the step's one device-to-host copy (reused: the copy is
        # waited for within the same step, so one buffer is enough).
        self._host_buf = (torch.empty(n * (2 + self.k), dtype=torch.int64, pin_memory=True)
                          if dev.type == "cuda" else None)
        # CUDA graphs for uniform-decode batches; captured by warmup (capture_cudagraphs).
        self.cudagraphs = (CudaGraphManager(model, kv_caches, n, self.k, max_blocks_per_req,
                                            cfg.block_size, kv_caches[0].shape[1] - 1, dev)
                           if cfg.use_cuda_graphs else None)
        self.phase = "serve"                      # "warmup" while warming up
        self.dispatch_log: list[tuple[str, tuple]] = []   # (phase, dispatch key) per step

    # ---- state update (vLLM: finish_requests / add_requests / update_requests) -----------
    def _update_states(self, sched: SchedulerOutput) -> None:
        for req_id in sorted(sched.finished_req_ids | sched.preempted_req_ids):
            self.state.remove_request(req_id)
        for new in sched.scheduled_new_reqs:
            slot = self.state.add_request(new)
            self.block_tables.set_blocks(slot, new.block_ids)
            self.sampling.add_request(slot, new)
        cached = sched.scheduled_cached_reqs
        for req_id, nc, blocks in zip(cached.req_ids, cached.num_computed_tokens,
                                      cached.new_block_ids):
            slot = self.state.req_id_to_index[req_id]
            self.state.update_request(slot, nc)
            self.block_tables.append(slot, blocks)
        self.state.apply_staged_writes()
        self.sampling.apply_staged_writes()
        self.block_tables.apply_staged_writes()

    # ---- one step --------------------------------------------------------------------
    @torch.inference_mode()
    def execute_model(self, sched: SchedulerOutput) -> ModelRunnerOutput:
        with record_function("mrbench::step"):
            with record_function("mrbench::prepare"):
                self.staging.new_step()
                self._update_states(sched)
                empty = not sched.total_num_scheduled_tokens
                if not empty:
                    batch = prepare_inputs(self.state, self.block_tables, sched, self.k,
                                           self.faults)
                    params = self.sampling.batch_params(batch.idx_mapping_np,
                                                        batch.idx_mapping, batch.samples_token)
            if empty:
                if self._host_buf is not None:       # CUDA: outside the measured phases
                    with record_function("mrbench::output"):
                        self._wait_uploads()
                return ModelRunnerOutput([], [], [])
            self.dispatch_log.append((self.phase, batch.dispatch_key))
            with record_function("mrbench::forward"):
                hidden = None
                if self.cudagraphs is not None and batch.dispatch_key[0] == "uniform_decode":
                    hidden = self.cudagraphs.run(batch)       # None: no captured size fits
                if hidden is None:
                    hidden = self.model(batch.input_ids, batch.meta, self.kv_caches)
                R, W = batch.logits_indices.shape
                logits = self.model.compute_logits(hidden[batch.logits_indices.reshape(-1)])
                logits = logits.view(R, W, -1)
            with record_function("mrbench::sample"):
                if W == 1:
                    sampled = sample(logits[:, 0], params)[:, None]
                    num_sampled = batch.samples_token_gpu.long()
                else:
                    drafts = self.state.draft_tokens[batch.idx_mapping, :W - 1]
                    dprobs = (self.proposer.draft_probs[batch.idx_mapping, :W - 1]
                              if isinstance(self.proposer, DraftModelProposer)
                              and params.any_random else None)
                    sampled = rejection_sample(logits, drafts, batch.num_drafts_gpu,
                                               batch.num_drafts.tolist(), params, dprobs)
                    num_sampled = count_sampled(sampled, self.faults) * batch.samples_token_gpu
            with record_function("mrbench::postprocess"):
                self._post_update(batch, sampled, num_sampled)
                self.state.advance_mirror_in_postprocess(batch.idx_mapping_np, batch.num_scheduled)
                if isinstance(self.proposer, NgramProposer):
                    self.proposer.propose(self.state, batch, params)
                elif self.proposer is not None:
                    self.proposer.propose(self.state, batch, params, self.block_tables)
        with record_function("mrbench::output"):
            return self._to_host(batch, sampled, num_sampled)

    def capture_cudagraphs(self) -> None:
        """Warmup: capture the uniform-decode graphs (no-op without CUDA graphs)."""
        if self.cudagraphs is not None:
            self.cudagraphs.capture()

    def _wait_uploads(self) -> None:
        """A step that scheduled nothing may still have staged uploads in flight (frees,
        poison writes); wait for them, as a full step's output copy does, before the next
        step reuses the pinned regions."""
        torch.cuda.current_stream().synchronize()

    def _post_update(self, batch: InputBatch, sampled: torch.Tensor,
                     num_sampled: torch.Tensor) -> None:
        """Advance the device truth by what was really accepted (vLLM's post_update)."""
        st, idx = self.state, batch.idx_mapping
        R, W = sampled.shape
        num_rejected = torch.where(num_sampled > 0, batch.num_drafts_gpu - (num_sampled - 1), 0)
        st.num_computed_tokens[idx] = (st.num_computed_tokens[idx] + batch.num_scheduled_gpu
                                       - num_rejected)
        last = sampled.gather(1, (num_sampled - 1).clamp(min=0)[:, None])[:, 0]
        st.last_sampled_tokens[idx] = torch.where(num_sampled > 0, last,
                                                  st.last_sampled_tokens[idx])
        total = st.total_len[idx]
        cols = torch.arange(W, device=sampled.device)
        keep = cols[None] < num_sampled[:, None]
        trash = st.all_token_ids.shape[1] - 1
        dest = torch.where(keep, total[:, None] + cols[None], trash)
        st.all_token_ids[idx[:, None].expand(R, W), dest] = torch.where(keep, sampled, 0)
        st.total_len[idx] = total + num_sampled

    def _to_host(self, batch: InputBatch, sampled: torch.Tensor,
                 num_sampled: torch.Tensor) -> ModelRunnerOutput:
        """The one device-to-host transfer of the step."""
        packed = torch.cat([num_sampled[:, None], sampled], 1)
        if self._host_buf is not None:
            host = self._host_buf.view(-1)[:packed.numel()].view(packed.shape)  # contiguous
            host.copy_(packed, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record()
            ev.synchronize()
        else:
            host = packed
        arr = host.numpy()
        toks = [row[1:1 + n].tolist() for n, row in zip(arr[:, 0], arr)]
        placeholder = [-1] * self.k
        drafts = [placeholder if t else [] for t in toks]
        return ModelRunnerOutput(batch.req_ids, toks, drafts, batch.dispatch_key)

    # ---- for audits (outside the step: these read the device) -----------------------------
    def audit(self) -> dict[str, dict[str, int]]:
        """Per live request: device truth vs host mirror of num_computed_tokens."""
        st = self.state
        truth = st.num_computed_tokens.cpu().numpy()
        return {rid: {"slot": s, "truth": int(truth[s]), "mirror": int(st.num_computed_tokens_np[s])}
                for rid, s in st.req_id_to_index.items()}
