"""Continuous-batching scheduler with chunked prefill, speculative tokens, preemption and
prefix caching.

It owns the truth about every request's progress (`num_computed_tokens`) and tells the
runner each step, as vLLM's scheduler does; a runner's own copies must agree with it.

With async scheduling the next step is scheduled while one is still in flight (vLLM's
AsyncScheduler): a request's in-flight query tokens count as computed and each token the
step will sample is a placeholder, so a decode row is scheduled again at once, and never
past max_tokens. A request that stops on a token (EOS, stop string) has been scheduled
once more by then; that extra step's output is dropped.

With prefix caching (the allocator's `enable_caching`), a request admitted from the queue
(new, or resumed after preemption) starts from its longest cached prefix: those blocks
are its first blocks and `num_computed_tokens` starts at their end, so the runner is handed
a request whose first tokens are computed, as for a PD import. At least the last token is
always computed (its logits sample the next token), as in vLLM. A block is registered in
the cache once its KV is computed (after the step), so requests admitted in one step do not
share what that step computes.
"""
from __future__ import annotations

from collections import deque
from typing import Callable

from .block_manager import BlockAllocator, extend_block_hashes
from .outputs import CachedRequestData, ModelRunnerOutput, NewRequestData, SchedulerOutput
from .request import Request, RequestStatus


class Scheduler:
    def __init__(self, *, max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int,
                 allocator: BlockAllocator, num_lookahead_tokens: int = 0,
                 stop_checker: Callable[[Request], None] | None = None,
                 on_admit: Callable[[Request], None] | None = None) -> None:
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.allocator = allocator
        self.lookahead = num_lookahead_tokens    # KV slots the drafter writes past the query
        self.stop_checker = stop_checker
        self.on_admit = on_admit                 # PD: load a request's KV into its new blocks
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self._finished_since_last: set[str] = set()
        self.num_preemptions = 0
        # Prefix caching, vLLM's `prefix_cache_queries` / `prefix_cache_hits`: tokens of the
        # new requests admitted (resumed ones are left out, as vLLM counts them apart) and
        # of their cached prefixes.
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0

    # ---- admission -------------------------------------------------------------------
    def add_request(self, req: Request) -> None:
        self.requests[req.req_id] = req
        self.waiting.append(req)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    # ---- scheduling ------------------------------------------------------------------
    def _max_drafts(self, req: Request) -> int:
        """Drafts worth verifying: not past max_tokens, not past max_model_len."""
        if not req.spec_token_ids:
            return 0
        left_out = req.sampling_params.max_tokens - len(req.output_token_ids) - 1
        left_len = self.max_model_len - req.num_tokens - 1
        return max(0, min(len(req.spec_token_ids), left_out, left_len))

    def _ensure_blocks(self, req: Request, num_new: int) -> bool:
        need_tokens = min(req.num_computed_tokens + req.num_inflight_tokens + num_new
                          + self.lookahead,
                          self.max_model_len + self.lookahead)
        n = self.allocator.blocks_needed(len(req.block_ids), need_tokens)
        if not n:
            return True
        got = self.allocator.allocate(n)
        if got is None:
            return False
        req.block_ids.extend(got)
        return True

    def _preempt(self, req: Request) -> None:
        """Recompute-style preemption: drop the KV, requeue at the front."""
        self.running.remove(req)
        self.allocator.release(req.block_ids)
        req.block_ids = []
        req.num_computed_tokens = 0
        req.num_inflight_tokens = req.num_output_placeholders = 0   # see update_from_output
        req.kv_payload = None                    # recomputed from its tokens instead
        req.spec_token_ids = []
        req.num_cached_blocks = 0                # its cached blocks stay hittable while free
        req.status = RequestStatus.WAITING
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)

    def schedule(self, now: float = 0.0) -> SchedulerOutput:
        budget = self.max_num_batched_tokens
        num_sched: dict[str, int] = {}
        spec: dict[str, list[int]] = {}
        preempted: set[str] = set()
        block_count_before: dict[str, int] = {}

        # 1. Running requests first (decodes and unfinished prefill chunks), in order.
        i = 0
        running, block_size = self.running, self.allocator.block_size
        while i < len(running) and budget > 0:
            req = running[i]
            if req.num_output_placeholders and self._reaches_limit(req):
                i += 1                           # async: its last token is already coming
                continue
            n_drafts = self._max_drafts(req)
            computed = req.num_computed_tokens + req.num_inflight_tokens
            pending = req.num_tokens + req.num_output_placeholders - computed
            num_new = min(pending + n_drafts, budget)
            n_drafts = max(0, min(n_drafts, num_new - pending))
            have = len(req.block_ids)
            block_count_before.setdefault(req.req_id, have)
            # Most steps need no new block (_ensure_blocks would allocate none).
            while (computed + num_new + self.lookahead > have * block_size
                   and not self._ensure_blocks(req, num_new)):
                victim = self.running[-1]
                self._preempt(victim)
                preempted.add(victim.req_id)
                num_sched.pop(victim.req_id, None)
                spec.pop(victim.req_id, None)
                if victim is req:
                    break
            if req.req_id in preempted:
                break
            num_sched[req.req_id] = num_new
            if n_drafts:
                spec[req.req_id] = req.spec_token_ids[:n_drafts]
            budget -= num_new
            i += 1
        samples = {rid for rid, n in num_sched.items()   # running rows; new ones below
                   if self._mark_inflight(self.requests[rid], n)}

        # 2. Then waiting requests, unless this step already had to preempt.
        new_reqs: list[Request] = []
        while self.waiting and not preempted and budget > 0 \
                and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            imported = req.kv_payload is not None    # PD: its prompt's KV comes with it
            hit = [] if imported else self._cache_hit(req)
            computed = req.num_computed_tokens if imported else len(hit) * block_size
            num_new = min(req.num_tokens - computed, budget)
            if not self._admit_blocks(req, hit, computed, num_new):
                break
            self.waiting.popleft()
            if imported:                         # blocks exist only now: load the KV
                self.on_admit(req)
                req.kv_payload = None
            elif self.allocator.enable_caching and not req.num_preemptions:
                self.prefix_cache_queries += req.num_tokens
                self.prefix_cache_hits += computed
            self._cache_full_blocks(req)         # a PD import's loaded prompt
            req.status = RequestStatus.RUNNING
            if req.first_scheduled_time is None:
                req.first_scheduled_time = now
            # Resumed requests recompute prompt + outputs (less a cached prefix); PD imports
            # keep their KV.
            req.prefill_len = req.prompt_len if imported else req.num_tokens
            self.running.append(req)
            new_reqs.append(req)
            num_sched[req.req_id] = num_new
            if self._mark_inflight(req, num_new):
                samples.add(req.req_id)
            budget -= num_new

        new_data = [NewRequestData(
            req_id=r.req_id, prompt_token_ids=list(r.prompt_token_ids),
            all_token_ids=r.all_token_ids, prefill_len=r.prefill_len,
            num_computed_tokens=r.num_computed_tokens, block_ids=list(r.block_ids),
            sampling_params=r.sampling_params, seed=r.seed) for r in new_reqs]
        new_ids = {r.req_id for r in new_reqs}
        cached = CachedRequestData()
        for req in self.running:
            if req.req_id in num_sched and req.req_id not in new_ids:
                cached.req_ids.append(req.req_id)
                # Computed before this step's tokens: earlier in-flight steps included.
                cached.num_computed_tokens.append(req.num_computed_tokens + req.num_inflight_tokens
                                                  - num_sched[req.req_id])
                cached.new_block_ids.append(req.block_ids[block_count_before[req.req_id]:])
        out = SchedulerOutput(
            scheduled_new_reqs=new_data, scheduled_cached_reqs=cached,
            num_scheduled_tokens=num_sched, total_num_scheduled_tokens=sum(num_sched.values()),
            scheduled_spec_decode_tokens=spec,
            finished_req_ids=self._finished_since_last, preempted_req_ids=preempted,
            samples_req_ids=samples)
        self._finished_since_last = set()
        return out

    def _cache_hit(self, req: Request) -> list[int]:
        """The cached blocks of the request's longest cached prefix, leaving at least its
        last token to compute (vLLM's max_cache_hit_length = num_tokens - 1); none without
        prefix caching."""
        if not self.allocator.enable_caching:
            return []
        bs = self.allocator.block_size
        hashes = extend_block_hashes(req.block_hashes, req.all_token_ids, bs)
        return self.allocator.longest_cache_hit(hashes, (req.num_tokens - 1) // bs)

    def _admission_need(self, hit: list[int], computed: int, num_new: int) -> tuple[int, int]:
        """(new blocks a queued request's first step takes, blocks it may take them from):
        a hit block waiting in the free queue counts against the free blocks, since taking
        it keeps it from being handed out."""
        alloc = self.allocator
        need_tokens = min(computed + num_new + self.lookahead, self.max_model_len + self.lookahead)
        return alloc.blocks_needed(len(hit), need_tokens), alloc.num_free - alloc.num_evictable(hit)

    def _admit_blocks(self, req: Request, hit: list[int], computed: int, num_new: int) -> bool:
        """Blocks for a queued request's first step: the cache hit's, then new ones. False
        (nothing taken) when they do not fit."""
        alloc = self.allocator
        n, usable = self._admission_need(hit, computed, num_new)
        if n > usable:
            return False
        alloc.touch(hit)
        req.block_ids = hit + (alloc.allocate(n) or [])
        req.num_computed_tokens = computed
        req.num_cached_blocks = len(hit)
        return True

    def kv_shortfall(self) -> tuple[int, int] | None:
        """(blocks needed, blocks usable) when the first waiting request cannot be admitted
        for want of KV blocks, as `schedule` would size its first step now; None when it
        could be, or nothing waits. A stuck engine says from this whether its KV pool is
        really exhausted."""
        if not self.waiting:
            return None
        req = self.waiting[0]
        imported = req.kv_payload is not None
        hit = [] if imported else self._cache_hit(req)
        computed = req.num_computed_tokens if imported else len(hit) * self.allocator.block_size
        num_new = min(req.num_tokens - computed, self.max_num_batched_tokens)
        n, usable = self._admission_need(hit, computed, num_new)
        return (n, usable) if n > usable else None

    def _cache_full_blocks(self, req: Request) -> None:
        """Register the request's full blocks whose KV is now computed (prefix caching)."""
        if not self.allocator.enable_caching:
            return
        bs = self.allocator.block_size
        n_full = min(req.num_computed_tokens, req.num_tokens) // bs
        if n_full <= req.num_cached_blocks:
            return
        hashes = extend_block_hashes(req.block_hashes, req.all_token_ids, bs)
        for i in range(req.num_cached_blocks, n_full):
            self.allocator.cache_block(req.block_ids[i], hashes[i])
        req.num_cached_blocks = n_full

    def _reaches_limit(self, req: Request) -> bool:
        """Will the tokens already coming end the request by length?"""
        n = req.num_output_placeholders
        return (len(req.output_token_ids) + n >= req.sampling_params.max_tokens
                or req.num_tokens + n >= self.max_model_len)

    def _mark_inflight(self, req: Request, num_new: int) -> bool:
        """Count a scheduled chunk as in flight; True if it samples the next token."""
        req.num_inflight_tokens += num_new
        if (req.num_computed_tokens + req.num_inflight_tokens
                < req.num_tokens + req.num_output_placeholders):
            return False                         # a prefill chunk short of the prompt's end
        req.num_output_placeholders += 1
        return True

    # ---- results -----------------------------------------------------------------------
    def update_from_output(self, sched: SchedulerOutput, out: ModelRunnerOutput,
                           now: float) -> list[Request]:
        """Advance progress by what was really computed; return requests that finished."""
        finished: list[Request] = []
        logprobs = out.logprobs or [None] * len(out.req_ids)
        for req_id, sampled, drafts, lps in zip(out.req_ids, out.sampled_token_ids,
                                                out.draft_token_ids, logprobs):
            req = self.requests.get(req_id)
            if req is None or req.status.finished:
                continue        # async: stopped (or aborted) while this step ran; dropped
            # Async: preempted while this step ran. Its KV is gone and it will recompute
            # from its tokens, so only the sampled tokens (valid) are kept.
            requeued = req.status == RequestStatus.WAITING
            scheduled_drafts = sched.scheduled_spec_decode_tokens.get(req_id, [])
            num_rejected = len(scheduled_drafts) - (len(sampled) - 1) if sampled else 0
            if not requeued:
                req.num_inflight_tokens -= sched.num_scheduled_tokens[req_id]
                req.num_output_placeholders -= req_id in sched.samples_req_ids
                req.num_computed_tokens += sched.num_scheduled_tokens[req_id] - num_rejected
            if scheduled_drafts:
                req.num_drafts += 1
                req.num_draft_tokens += len(scheduled_drafts)
                req.num_accepted_tokens += len(sampled) - 1
                if len(req.accepted_per_pos) < len(scheduled_drafts):
                    req.accepted_per_pos += [0] * (len(scheduled_drafts) - len(req.accepted_per_pos))
                for i in range(len(sampled) - 1):     # drafts are accepted as a prefix
                    req.accepted_per_pos[i] += 1
            req.spec_token_ids = list(drafts)
            for i, tok in enumerate(sampled):
                req.output_token_ids.append(tok)
                req.token_times.append(now)
                if lps is not None:
                    req.output_logprobs.append(lps[i])
                if self._check_stop(req, tok):
                    break
            if not requeued:
                self._cache_full_blocks(req)     # before a finished request frees them
            if req.status.finished:
                finished.append(req)
                if requeued:
                    self.waiting.remove(req)
                    self._finished_since_last.add(req.req_id)
                else:
                    self._free(req)
        return finished

    def _check_stop(self, req: Request, tok: int) -> bool:
        sp = req.sampling_params
        if (not sp.ignore_eos and tok in req.eos_token_ids) or tok in sp.stop_token_ids:
            req.status, req.stop_reason = RequestStatus.FINISHED_STOPPED, tok
        elif len(req.output_token_ids) >= sp.max_tokens or req.num_tokens >= self.max_model_len:
            req.status = RequestStatus.FINISHED_LENGTH
        if not req.status.finished and self.stop_checker is not None and sp.stop:
            self.stop_checker(req)   # stop strings (requests that have any): the engine detokenizes
        return req.status.finished

    def _free(self, req: Request) -> None:
        # block_ids stay on the request as a record: the PD hand-off reads those blocks
        # right after this step, before any later step can reuse them.
        self.running.remove(req)
        self.allocator.release(req.block_ids)
        self._finished_since_last.add(req.req_id)

    def abort(self, req_ids: list[str]) -> None:
        """Drop requests wherever they are (the runner frees their slots next step)."""
        for rid in req_ids:
            req = self.requests.pop(rid)
            if req in self.waiting:
                self.waiting.remove(req)
            elif req in self.running:
                self._free(req)
            req.status = RequestStatus.FINISHED_STOPPED
