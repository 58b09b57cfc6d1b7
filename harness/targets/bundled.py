"""The bundled target: runner_impl in this process (V2 MRv2-style, or the V1 reference)."""
from __future__ import annotations

import time
from typing import Any

from runner_impl import FAULTS, LLM, RunnerError, SamplingParams

from ..errors import BadInput
from .base import AuditSample, Completion, EngineOptions, SideSpec, Step, register

RUNNERS = ("v2", "v1")
PHASES = ("prepare", "forward", "sample", "postprocess", "output")


class BundledSession:
    step_label = "mrbench::step"
    phase_labels = {p: f"mrbench::{p}" for p in PHASES}

    def __init__(self, side: SideSpec, options: EngineOptions) -> None:
        t0 = time.perf_counter()
        self.side, self.options = side, options
        self.llm = LLM(side.model, runner=side.runner, device=side.device, seed=side.seed,
                       faults=side.faults, max_num_seqs=options.max_num_seqs,
                       max_num_batched_tokens=options.max_num_batched_tokens,
                       num_speculative_tokens=options.num_speculative_tokens,
                       speculative_method=options.speculative_method,
                       pd_disagg=options.pd_disagg, dtype=options.dtype,
                       debug_poison_freed_slots=options.state_audit and side.runner == "v2")
        self.startup_s = time.perf_counter() - t0      # load + warmup
        self._audits: list[AuditSample] = []
        self.auditing = False          # the driver turns it on outside timed passes
        self._step0 = self._step_counts()
        if options.state_audit and side.runner == "v2":
            self.llm.add_step_callback(self._audit)

    def _step_counts(self) -> dict[str, int]:
        return {c.name: len(c.step_records) for c in self.llm.cores}

    def _audit(self, core, sched, out) -> None:
        """Mirror vs truth after every step (a device read: never during a timed pass).

        After a step the device truth has advanced and the mirror is refreshed only at the
        next step, so a lag (negative slack) is normal; the mirror ahead of the truth by more
        than k is the drift of vLLM PR 42202's bug class."""
        if not self.auditing:
            return
        a = core.runner.audit()
        if not a:
            return
        slack = [v["mirror"] - v["truth"] for v in a.values()]
        self._audits.append(AuditSample(core.name, len(core.step_records) - 1, max(slack),
                                        min(slack), self.options.num_speculative_tokens))

    def generate(self, prompts: list[str], max_tokens: int, stop: list[str]) -> list[Completion]:
        sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, stop=list(stop))
        outs = self.llm.generate(prompts, sp)
        return [Completion(o.prompt_token_ids, o.token_ids, o.text, o.metrics.arrival_time,
                           list(o.metrics.token_times), o.outputs[0].finish_reason,
                           o.metrics.kv_handoff_s) for o in outs]

    def fits(self, prompt: str, max_tokens: int) -> bool:
        return len(self.llm.tokenizer.encode(prompt)) < self.llm.max_model_len

    def steps(self) -> list[Step]:
        out = []
        for core in self.llm.cores:
            for r in core.step_records[self._step0[core.name]:]:
                kind = r.dispatch_key[0] if r.dispatch_key else "empty"
                out.append(Step(r.instance, r.step, r.t_start, r.t_end, r.num_reqs,
                                r.num_tokens, str(kind)))
        return sorted(out, key=lambda s: s.t_start)

    def reset_steps(self) -> None:
        self._step0 = self._step_counts()
        self._audits = []

    def audits(self) -> list[AuditSample]:
        return list(self._audits)

    def resolved(self) -> dict[str, Any]:
        cfg = self.llm.config
        return dict(target="bundled", runner=cfg.runner, device=str(cfg.torch_device),
                    dtype=str(cfg.torch_dtype).removeprefix("torch."),
                    model=str(self.llm.model_dir), faults=list(self.side.faults),
                    seed=self.side.seed, startup_s=round(self.startup_s, 3),
                    engine={k: getattr(cfg, k) for k in (
                        "max_num_seqs", "max_num_batched_tokens", "block_size",
                        "num_speculative_tokens", "speculative_method", "pd_disagg",
                        "debug_poison_freed_slots")})

    def close(self) -> None:
        self.llm = None


@register("bundled")
class BundledTarget:
    name = "bundled"

    def validate(self, side: SideSpec) -> None:
        if side.runner not in RUNNERS:
            raise BadInput(f"bundled target has runners {', '.join(RUNNERS)}; got {side.runner!r}")
        for f in side.faults:
            if f not in FAULTS:
                raise BadInput(f"unknown fault {f!r}; known: {', '.join(sorted(FAULTS))}")
        if side.device not in ("cpu", "cuda") and not side.device.startswith("cuda:"):
            raise BadInput(f"device must be cpu or cuda[:N], got {side.device!r}")
        if side.device.startswith("cuda"):
            import torch
            if not torch.cuda.is_available():
                raise BadInput(f"device {side.device!r} requested but CUDA is not available here")
        if side.model is not None:
            from runner_impl.model.loader import load_config, load_tokenizer
            try:
                load_config(side.model)
                load_tokenizer(side.model)
            except RunnerError as e:
                raise BadInput(f"--model {side.model}: {e}") from None

    def open(self, side: SideSpec, options: EngineOptions) -> BundledSession:
        self.validate(side)
        try:
            return BundledSession(side, options)
        except RunnerError as e:
            raise BadInput(f"bundled target: {e}") from None

    def info(self) -> dict[str, Any]:
        return dict(runners=list(RUNNERS), faults=sorted(FAULTS))
