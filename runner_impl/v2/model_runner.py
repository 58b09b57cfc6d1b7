"""The MRv2-style model runner: persistent slots, device truth, host mirror, no syncs.

One step = prepare -> forward -> sample -> postprocess, one method each (a harness puts its
profiler ranges around them: mrbench's harness/measure/phases.py), then one device-to-host copy of
the sampled tokens (the output methods), outside the measured phases. On CUDA, uniform-decode forwards replay CUDA graphs captured
at warmup (`cuda_graph.py`); everything else runs eagerly.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import torch

from ..config import EngineConfig
from ..engine.outputs import ModelRunnerOutput, SchedulerOutput
from ..faults import FaultSet
from ..logprobs import SlotLogprobs, StepLogprobs, compute
from ..model.llama import LlamaForCausalLM
from ..sampler import sample
from ..slow_step import SlowStep
from .block_table import BlockTables
from .cuda_graph import CudaGraphManager
from .input_batch import InputBatch, prepare_inputs
from .rejection_sampler import count_sampled, rejection_sample
from .sampler import SamplingState
from .spec_decode import DraftModelProposer, NgramProposer
from .staging import PinnedStaging
from .states import RequestState
from .step_graphs import StepGraphs


class AsyncOutput:
    """A queued step's output: `get()` waits for its copy to the host (async scheduling)."""

    def __init__(self, finish: Callable[[], ModelRunnerOutput],
                 event: "torch.cuda.Event | None") -> None:
        self._finish, self._event = finish, event

    def get(self) -> ModelRunnerOutput:
        if self._event is not None:
            self._event.synchronize()
        return self._finish()


class ModelRunnerV2:
    name = "v2"

    def __init__(self, cfg: EngineConfig, model: LlamaForCausalLM, kv_caches: list[torch.Tensor],
                 max_model_len: int, max_blocks_per_req: int,
                 draft: tuple[LlamaForCausalLM, list[torch.Tensor]] | None = None) -> None:
        self.cfg, self.model, self.kv_caches = cfg, model, kv_caches
        self.k = cfg.num_speculative_tokens
        self.faults = cfg.faults
        # The switches `sample` takes. vLLM's fused top-k / top-p kernel returns no
        # logits, so an engine that returns processed logprobs never runs it: nor the
        # `fused-top-k-raw-logits` path, which stands for it.
        self.sample_faults = (FaultSet(self.faults.names - {"fused-top-k-raw-logits"})
                              if cfg.logprobs_mode == "processed_logprobs" else self.faults)
        dev = cfg.torch_device
        self.slow_step = (SlowStep(cfg.faults.slow_step_pct, dev)
                          if cfg.faults.slow_step_pct else None)
        n = cfg.max_num_seqs
        # Async scheduling keeps one step in flight while the next is prepared: its uploads
        # and its output copy need a second set of pinned buffers.
        depth = 2 if cfg.async_scheduling else 1
        self.staging = PinnedStaging(dev, depth=depth)
        poison = model.config.vocab_size - 1 if cfg.debug_poison_freed_slots else None
        self.state = RequestState(n, max_model_len, self.k, dev, self.faults, self.staging, poison)
        self.block_tables = BlockTables(n, max_blocks_per_req, cfg.block_size, dev, self.staging)
        self.sampling = SamplingState(n, model.config.vocab_size, dev, self.staging, self.faults)
        self.proposer: NgramProposer | DraftModelProposer | None = None
        if self.k and cfg.speculative_method == "ngram":
            self.proposer = NgramProposer(self.k, cfg.ngram_min, cfg.ngram_max)
        elif self.k:
            assert draft is not None
            self.proposer = DraftModelProposer(draft[0], draft[1], self.k, n,
                                               model.config.vocab_size, dev)
        self.logprob_slots = SlotLogprobs(n)
        # Pinned host buffers for the step's one device-to-host copy, reused `depth` steps
        # later: by then that copy has been waited for.
        self._host_bufs = ([torch.empty(n * (2 + self.k), dtype=torch.int64, pin_memory=True)
                            for _ in range(depth)] if dev.type == "cuda" else [])
        self._num_copies = 0
        self._events = [torch.cuda.Event() for _ in range(4)] if dev.type == "cuda" else []
        self._num_events = 0
        # CUDA graphs for uniform-decode batches; captured by warmup (capture_cudagraphs).
        self.cudagraphs = (CudaGraphManager(model, kv_caches, n, self.k, max_blocks_per_req,
                                            cfg.block_size, kv_caches[0].shape[1] - 1, dev)
                           if cfg.use_cuda_graphs else None)
        # CUDA graphs of prepare's device half and post_update, per batch size (k = 0).
        self.step_graphs = (StepGraphs(self.state, self.block_tables, n, self._post_update,
                                       self.cudagraphs)
                            if cfg.use_cuda_graphs and not self.k else None)
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
            self.logprob_slots.add_request(slot, new.sampling_params)
        cached = sched.scheduled_cached_reqs
        if cached.req_ids:
            to_slot = self.state.req_id_to_index
            slots = [to_slot[r] for r in cached.req_ids]
            self.state.update_requests(np.array(slots, dtype=np.int64),
                                       np.array(cached.num_computed_tokens, dtype=np.int64))
            for slot, blocks in zip(slots, cached.new_block_ids):
                if blocks:
                    self.block_tables.append(slot, blocks)
        self.state.apply_staged_writes()
        self.sampling.apply_staged_writes()
        self.block_tables.apply_staged_writes()

    # ---- one step ----------------------------------------------------------------------
    # Each phase is one method (prepare, forward, sample, postprocess; output = the copy
    # methods below), so a harness can put its own profiler ranges around them
    # (mrbench: harness/measure/phases.py, BUNDLED_V2) instead of trusting labels in the runner.
    @torch.inference_mode()
    def execute_model(self, sched: SchedulerOutput) -> ModelRunnerOutput:
        """One step, waited for: its output is on the host when this returns."""
        step = self._launch(sched)
        if step is None:
            if self._host_bufs:                      # CUDA: outside the measured phases
                self._wait_uploads()
            return ModelRunnerOutput([], [], [])
        return self._finish_copy(step[0], *self._start_copy(*step))

    @torch.inference_mode()
    def execute_model_async(self, sched: SchedulerOutput) -> "AsyncOutput":
        """Async scheduling (vLLM's): queue the step, start its output copy and return
        without waiting, so the host prepares the next step while the device runs this one.
        The next step's inputs come from the device truth this one updates (MRv2's
        `last_sampled_tokens`), never from this step's host output."""
        step = self._launch(sched)
        if step is None:
            ev = self._record_event()
            return AsyncOutput(lambda: ModelRunnerOutput([], [], []), ev)
        host, logprobs, ev = self._start_copy(*step)
        return AsyncOutput(lambda: self._finish_copy(step[0], host, logprobs, None), ev)

    def _launch(self, sched: SchedulerOutput
                ) -> tuple[InputBatch, torch.Tensor, torch.Tensor, torch.Tensor | None,
                           StepLogprobs | None] | None:
        """One step's prepare -> forward -> sample -> postprocess, queued on the device
        (the output copy is not part of it); None if the step scheduled nothing (it still
        applied frees and admissions)."""
        prepared = self._prepare(sched)
        if prepared is None:
            return None
        batch, params = prepared
        self.dispatch_log.append((self.phase, batch.dispatch_key))
        logits = self._forward(batch)
        sampled, num_sampled, logprobs = self._sample(batch, logits, params)
        num_sampled, packed = self._postprocess(batch, params, sampled, num_sampled)
        return batch, sampled, num_sampled, packed, logprobs

    def _prepare(self, sched: SchedulerOutput) -> tuple[InputBatch, object] | None:
        """State updates, then the batch's inputs on the device; None for an empty step."""
        self.staging.new_step()
        self._update_states(sched)
        if not sched.total_num_scheduled_tokens:
            return None
        batch = prepare_inputs(self.state, self.block_tables, sched, self.k,
                               self.faults, self.step_graphs)
        params = self.sampling.batch_params(batch.idx_mapping_np, batch.idx_mapping,
                                            batch.samples_token, lazy=batch.graphed)
        return batch, params

    def _forward(self, batch: InputBatch) -> torch.Tensor:
        """The model (a CUDA-graph replay for uniform decode) and the logits, [R, W, V]."""
        if self.slow_step is not None:          # the `slow-step:PCT` ruler
            return self.slow_step.run(self._model_forward, batch, key=batch.dispatch_key)
        return self._model_forward(batch)

    def _model_forward(self, batch: InputBatch) -> torch.Tensor:
        replayed = None
        if self.cudagraphs is not None and batch.dispatch_key[0] == "uniform_decode":
            replayed = self.cudagraphs.run(batch)     # None: no captured size fits
        R, W = batch.logits_indices.shape
        if replayed is not None and replayed[1] is not None:
            return replayed[1].view(R, W, -1)         # k = 0: computed in the graph
        hidden = (replayed[0] if replayed is not None
                  else self.model(batch.input_ids, batch.meta, self.kv_caches))
        logits = self.model.compute_logits(hidden[batch.logits_indices.reshape(-1)])
        return logits.view(R, W, -1)

    def _sample(self, batch: InputBatch, logits: torch.Tensor, params
                ) -> tuple[torch.Tensor, torch.Tensor | None, StepLogprobs | None]:
        """Sampled tokens [R, W] and how many each row keeps (rejection sampling for
        drafts); None when the step graph counts them. Then the logprobs, where a request
        asked (device work, copied out with the tokens)."""
        W = logits.shape[1]
        if W == 1:
            sampled = sample(logits[:, 0], params, self.sample_faults)[:, None]
            num_sampled = None if batch.graphed else batch.samples_token_gpu.long()
            return sampled, num_sampled, self._logprobs(batch, logits, params, sampled)
        drafts = self.state.draft_tokens[batch.idx_mapping, :W - 1]
        dprobs = (self.proposer.draft_probs[batch.idx_mapping, :W - 1]
                  if isinstance(self.proposer, DraftModelProposer)
                  and params.any_random else None)
        sampled = rejection_sample(logits, drafts, batch.num_drafts_gpu,
                                   batch.num_drafts.tolist(), params, dprobs, self.faults)
        return (sampled, count_sampled(sampled, self.faults) * batch.samples_token_gpu,
                self._logprobs(batch, logits, params, sampled))

    def _logprobs(self, batch: InputBatch, logits: torch.Tensor, params,
                  sampled: torch.Tensor) -> StepLogprobs | None:
        """The logprobs of every logits row's token [R * W], for the host to cut per
        request (the rows each kept); None, and no work, when no request asked."""
        num = self.logprob_slots.batch(batch.idx_mapping_np)
        if num is None:
            return None
        R, W, V = logits.shape
        tokens, row_of = sampled.reshape(-1), None
        if W > 1:              # a rejected position holds -1: its row is never kept
            tokens = tokens.clamp(min=0)
            row_of = torch.arange(R, device=logits.device).repeat_interleave(W)
        return StepLogprobs(compute(logits.reshape(R * W, V), tokens, int(num.max()),
                                    self.cfg.logprobs_mode, params, row_of, self.faults),
                            num, W)

    def _postprocess(self, batch: InputBatch, params, sampled: torch.Tensor,
                     num_sampled: torch.Tensor | None
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Advance the device truth and the host mirror, propose the next drafts;
        (num_sampled, packed output or None)."""
        packed = None
        if batch.graphed:
            num_sampled, packed = self.step_graphs.post(batch.logits_indices.shape[0], sampled)
        else:
            self._post_update(batch.idx_mapping, batch.num_scheduled_gpu,
                              batch.num_drafts_gpu, sampled, num_sampled)
        if params.penalties is not None:          # a step that sampled with penalties
            self.sampling.count_sampled(batch.idx_mapping, sampled, num_sampled)
        self.state.advance_mirror_in_postprocess(batch.idx_mapping_np, batch.num_scheduled)
        if isinstance(self.proposer, NgramProposer):
            self.proposer.propose(self.state, batch, params)
        elif self.proposer is not None:
            self.proposer.propose(self.state, batch, params, self.block_tables)
        return num_sampled, packed

    def capture_cudagraphs(self) -> None:
        """Warmup: capture the uniform-decode graphs (no-op without CUDA graphs)."""
        if self.cudagraphs is not None:
            self.cudagraphs.capture()
        if self.step_graphs is not None:
            self.step_graphs.capture()

    def _wait_uploads(self) -> None:
        """A step that scheduled nothing may still have staged uploads in flight (frees,
        poison writes); wait for them, as a full step's output copy does, before the next
        step reuses the pinned regions."""
        torch.cuda.current_stream().synchronize()

    def _post_update(self, idx: torch.Tensor, num_scheduled: torch.Tensor,
                     num_drafts: torch.Tensor, sampled: torch.Tensor,
                     num_sampled: torch.Tensor) -> None:
        """Advance the device truth by what was really accepted (vLLM's post_update).
        Device work only: StepGraphs captures it."""
        st = self.state
        R, W = sampled.shape
        num_rejected = torch.where(num_sampled > 0, num_drafts - (num_sampled - 1), 0)
        st.num_computed_tokens[idx] = (st.num_computed_tokens[idx] + num_scheduled
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

    def _record_event(self) -> "torch.cuda.Event | None":
        """Record one of a ring of events: each is waited for (the step's output read)
        before the ring comes back to it, one step in flight at most."""
        if not self._host_bufs:
            return None
        self._num_events += 1
        ev = self._events[self._num_events % len(self._events)]
        ev.record()
        return ev

    def _start_copy(self, batch: InputBatch, sampled: torch.Tensor, num_sampled: torch.Tensor,
                    packed: torch.Tensor | None = None, logprobs: StepLogprobs | None = None
                    ) -> tuple[torch.Tensor, StepLogprobs | None, "torch.cuda.Event | None"]:
        """Queue the one device-to-host transfer of the step (pinned buffer + event).
        `packed`: [num_sampled | sampled] already built (by StepGraphs' post graph). The
        step's logprobs, where a request asked, go with it (a second copy, same event)."""
        if packed is None:
            packed = torch.cat([num_sampled[:, None], sampled], 1)
        if not self._host_bufs:
            return packed, logprobs, None
        buf = self._host_bufs[self._num_copies % len(self._host_bufs)]
        self._num_copies += 1
        host = buf.view(-1)[:packed.numel()].view(packed.shape)  # contiguous
        host.copy_(packed, non_blocking=True)
        if logprobs is not None:
            lp_host = torch.empty(logprobs.packed.shape, dtype=logprobs.packed.dtype,
                                  pin_memory=True)
            lp_host.copy_(logprobs.packed, non_blocking=True)
            logprobs = dataclasses.replace(logprobs, packed=lp_host)
        return host, logprobs, self._record_event()

    def _finish_copy(self, batch: InputBatch, host: torch.Tensor,
                     logprobs: StepLogprobs | None, ev: "torch.cuda.Event | None"
                     ) -> ModelRunnerOutput:
        if ev is not None:
            ev.synchronize()
        arr = host.numpy()
        counts = arr[:, 0]
        if (counts == arr.shape[1] - 1).all():       # every row kept all it sampled
            toks = arr[:, 1:].tolist()
        else:
            toks = [row[1:1 + n].tolist() for n, row in zip(counts, arr)]
        placeholder = [-1] * self.k
        drafts = [placeholder if t else [] for t in toks]
        per_request = (None if logprobs is None
                       else logprobs.per_request(logprobs.packed.numpy(), counts))
        return ModelRunnerOutput(batch.req_ids, toks, drafts, batch.dispatch_key, per_request)

    # ---- for audits (outside the step: these read the device) -----------------------------
    def audit(self) -> dict[str, dict[str, int]]:
        """Per live request: device truth vs host mirror of num_computed_tokens."""
        st = self.state
        truth = st.num_computed_tokens.cpu().numpy()
        return {rid: {"slot": s, "truth": int(truth[s]), "mirror": int(st.num_computed_tokens_np[s])}
                for rid, s in st.req_id_to_index.items()}
