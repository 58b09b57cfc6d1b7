"""Historic MRv2 bugs put back into real vLLM, inside the engine's process only.

A fault is a source patch of one vLLM function, written against one vLLM release from the
upstream PR's own diff: the pre-fix line comes back in place of the fix. It is applied at
engine start, before the engine is built, by recompiling the function from its patched
source in its own module's namespace and setting it on its class. The installed vLLM files
are never touched, and no other process sees the change.

A patch names the exact line it replaces; if that line is not found exactly once in the
installed function (another release, a local edit), the fault is refused rather than
applied somewhere else. The release check runs first, in the harness's process, so a
mismatch is one line and exit 2 before any engine starts.
"""
from __future__ import annotations

import importlib
import inspect
import itertools
import linecache
import textwrap
import types
from dataclasses import dataclass
from typing import Any

from mrbench.contract import BadInput


@dataclass(frozen=True)
class SourcePatch:
    module: str            # e.g. "vllm.v1.worker.gpu.model_runner"
    qualname: str          # "Class.method" or "function"
    old: str               # the fixed line as it stands in the release (stripped match)
    new: str               # the pre-fix line(s), same indentation as `old`
    # modules that imported a module-level function by name (`from .x import f`): their
    # binding is replaced too, or they would keep calling the fixed function
    rebind: tuple[str, ...] = ()


@dataclass(frozen=True)
class VllmFault:
    name: str
    pr: int
    what: str
    versions: tuple[str, ...]          # vLLM releases the patch was written against
    patches: tuple[SourcePatch, ...]
    # releases where the patch applies but leaves nothing to catch, and why: `faults` runs
    # such a fault only when asked by name, and says so
    inert: tuple[tuple[str, str], ...] = ()
    # the entries that reach the code it changes, where those are not `quick`'s (a feature
    # a coverage suite exercises, such as one attention backend): `faults` runs it only
    # when named, as the bundled target's coverage faults
    coverage: str = ""

    def inert_on(self, release: str | None) -> str | None:
        """Why this fault has nothing to catch on `release`, or None."""
        return dict(self.inert).get(release or "")


# where the faults judged side against side are caught: V2 on both sides
_ONE_RUNNER = "two builds of V2, or V2 against V2 (`--candidate v2 --baseline v2`): "

FAULTS: dict[str, VllmFault] = {f.name: f for f in (
    VllmFault(
        "stale-slot-state", 39833,
        "V2's RequestState.add_request no longer clears the slot's draft_tokens, so a reused "
        "slot keeps its previous occupant's drafts (the PR's other half, last_sampled_tokens, "
        "has no line in 0.26: its combine kernel writes the last sampled token only for "
        "generated positions, and the scheduler recomputes a fully transferred prompt's last "
        "token, so a new request's first step is never a decode)",
        ("0.26.0",),
        (SourcePatch(
            "vllm.v1.worker.gpu.states", "RequestState.add_request",
            old="self.draft_tokens[req_idx].zero_()",
            new="pass  # mrbench fault stale-slot-state (vLLM PR 39833 reverted): the reused "
                "slot keeps its previous occupant's draft tokens"),),
        inert=(("0.26.0", "a new request's first step is never a decode there, and its first "
                "proposal writes its drafts before any step reads them, so with the line "
                "reverted V2's tokens and drafts under PD with EAGLE are unchanged "
                "(docs/vllm-gpu.md, \"39833 on 0.26\")"),)),
    VllmFault(
        "seq-lens-sync", 40654,
        "V2's prepare_inputs reads the device seq_lens back to the host every step (the "
        "pre-fix `seq_lens_cpu`), instead of the numpy upper bound",
        ("0.26.0",),
        (SourcePatch(
            "vllm.v1.worker.gpu.model_runner", "GPUModelRunner.prepare_inputs",
            old="seq_lens_cpu_upper_bound = torch.from_numpy(seq_lens_cpu_upper_bound_np)",
            new="seq_lens_cpu_upper_bound = seq_lens.cpu()  # mrbench fault seq-lens-sync "
                "(vLLM PR 40654 reverted): a device-to-host read per step"),)),
    VllmFault(
        "mirror-increment", 42202,
        "V2's CPU mirror num_computed_tokens_np is no longer set from the scheduler in "
        "update_requests, and is advanced by the scheduled tokens after sampling instead: "
        "every rejected draft leaves it further ahead of the device truth",
        ("0.26.0",),
        (SourcePatch(
            "vllm.v1.worker.gpu.model_runner", "GPUModelRunner.update_requests",
            old="num_computed_tokens_np[req_index] = num_computed_tokens",
            new="pass  # mrbench fault mirror-increment (vLLM PR 42202 reverted): the mirror "
                "is not set from the scheduler"),
         SourcePatch(
            "vllm.v1.worker.gpu.model_runner", "GPUModelRunner.sample_tokens",
            old="if self.num_speculative_steps > 0:",
            new="# mrbench fault mirror-increment (vLLM PR 42202 reverted): advance the "
                "mirror by what was scheduled\n"
                "self.req_states.num_computed_tokens_np[input_batch.idx_mapping_np] += "
                "input_batch.num_scheduled_tokens\n"
                "if self.num_speculative_steps > 0:"))),
    VllmFault(
        "accept-count-cat-argmax", 38372,
        "the class of PR 38372 (which changed V1's hybrid-model path) where V2 counts "
        "sampled tokens: the count again via a -1 sentinel column, torch.cat and argmax, "
        "before get_num_sampled_and_rejected (same values, extra ops and allocations)",
        ("0.26.0",),
        (SourcePatch(
            "vllm.v1.worker.gpu.spec_decode.rejection_sampler", "RejectionSampler.__call__",
            old="num_sampled, num_rejected = get_num_sampled_and_rejected(",
            new="# mrbench fault accept-count-cat-argmax (the class of vLLM PR 38372)\n"
                "_cols = torch.arange(sampled.shape[1], device=sampled.device)\n"
                "_marked = torch.where(_cols[None, :] < num_sampled[:, None], sampled, -1)\n"
                "_padded = torch.cat([_marked, _marked.new_full((_marked.shape[0], 1), -1)], "
                "dim=1)\n"
                "num_sampled = (_padded == -1).int().argmax(dim=1).to(num_sampled.dtype)\n"
                "num_sampled, num_rejected = get_num_sampled_and_rejected("),)),
    VllmFault(
        "warmup-short-prefill", 40746,
        "V2's warmup_kernels prefills dummy prompts of 2 tokens again, not decode_query_len "
        "+ 1: with k = 1 that prefill is a uniform decode of query length 2, so the prefill "
        "(mixed) path is never warmed",
        ("0.26.0",),
        (SourcePatch(
            "vllm.v1.worker.gpu.warmup", "warmup_kernels",
            old="prompt_len = decode_query_len + 1",
            new="prompt_len = 2  # mrbench fault warmup-short-prefill (vLLM PR 40746 "
                "reverted): a valid decode query when k = 1",
            rebind=("vllm.v1.worker.gpu_worker",)),)),
    VllmFault(
        "flashinfer-pinned-buffers", 32799,
        "FlashInfer's metadata builder pins its reused host buffers under V2 again: V2 never "
        "waits for a step's copies to the GPU, so step N+1 can rewrite a pinned buffer "
        "(page table pointers, last page lengths) before step N's asynchronous copy of it "
        "has run",
        ("0.26.0",),
        (SourcePatch(
            "vllm.v1.attention.backends.flashinfer", "FlashInferMetadataBuilder.__init__",
            old="self.pin_memory = not vllm_config.use_v2_model_runner and PIN_MEMORY",
            new="self.pin_memory = PIN_MEMORY  # mrbench fault flashinfer-pinned-buffers "
                "(vLLM PR 32799 reverted): reused buffers pinned under V2 too"),),
        coverage="the FLASHINFER entries of `backends` (`backends:ENTRY@FLASHINFER`): no other "
                 "entry builds FlashInfer's metadata",
        inert=(("0.26.0", "with the buffers pinned, V2's tokens, syncs and ops on both "
                "FLASHINFER entries were those of the clean run (llama-1b, H200, one run); "
                "the engine waits for step N-1's output before it schedules step N+1, and "
                "step N's copies follow N-1's sampling on the GPU (docs/coverage.md, "
                "\"Attention backends\")"),)),
    VllmFault(
        "triton-max-seq-len-sync", 23216,
        "Triton attention's metadata builder takes max_seq_len from the host copy of the "
        "sequence lengths again (`seq_lens_cpu.max()`), as it did before CommonAttentionMetadata "
        "carried max_seq_len: V2 fills no host copy, so every build reads the device seq_lens "
        "back to the host (a sync per step; V1's host copy is there)",
        ("0.26.0",),
        (SourcePatch(
            "vllm.v1.attention.backends.triton_attn", "TritonAttentionMetadataBuilder.build",
            old="max_seq_len = common_attn_metadata.max_seq_len",
            new="max_seq_len = int(common_attn_metadata.seq_lens_cpu.max())  # mrbench fault "
                "triton-max-seq-len-sync (vLLM PR 23216 reverted): from the host copy"),),
        coverage="the TRITON_ATTN entries of `backends` (`backends:ENTRY@TRITON_ATTN`): no "
                 "other entry builds Triton attention's metadata"),
    VllmFault(
        "flashinfer-spec-full-graphs", 32936,
        "V2 sizes its CUDA graphs without asking the attention backend what it supports "
        "again: with FlashInfer (full graphs for single-token decodes only) and spec decode, "
        "V2 keeps FULL_AND_PIECEWISE and captures full graphs of (k+1)-token decode batches, "
        "where V1 and the fixed V2 fall back to PIECEWISE",
        ("0.26.0",),
        (SourcePatch(
            "vllm.v1.worker.gpu.model_runner", "GPUModelRunner.initialize_kv_cache",
            old="attn_cg_support.min_cg_support,",
            new="type(attn_cg_support.min_cg_support).ALWAYS,  # mrbench fault "
                "flashinfer-spec-full-graphs (vLLM PR 32936 reverted): the backend's "
                "CUDA-graph support is not consulted"),),
        coverage="`backends:spec@FLASHINFER`: FlashInfer with spec decode is the one "
                 "combination there whose CUDA-graph support is below UNIFORM_BATCH "
                 "(its cudagraph_mode check catches it)"),
    # The three below are judged side against side: one runner on both sides (two builds,
    # scripts/gpu/make_build.py, or V2 against V2 with the fault put in the candidate), in
    # `gpu-ab`. Against V1 their checks are not gated (latency differs by design, the
    # samplers differ, launches are compared only within one runner), so `faults` runs them
    # only when named.
    VllmFault(
        "output-copy-event-reuse", 39115,
        "V2's output copies share one CUDA event again, as the runner's single "
        "output_copy_event did: under async scheduling step N+1 records it before step N's "
        "output is read, so reading step N waits for step N+1's sampling and copy, and the "
        "host schedules step N+2 while the GPU idles (the lost overlap shows as step time: "
        "median_step_ms and the inter-token latency in a two-build run; without async "
        "scheduling nothing changes)",
        ("0.26.0",),
        (SourcePatch(
            "vllm.v1.worker.gpu.async_utils", "AsyncOutput.__init__",
            old="self.copy_event = torch.cuda.Event(blocking=True)",
            new="# mrbench fault output-copy-event-reuse (vLLM PR 39115 reverted): one "
                "event for every step's output copy\n"
                "if not hasattr(copy_stream, \"mrbench_output_copy_event\"):\n"
                "    copy_stream.mrbench_output_copy_event = torch.cuda.Event(blocking=True)\n"
                "self.copy_event = copy_stream.mrbench_output_copy_event"),),
        coverage=_ONE_RUNNER + "median_step_ms and the ITL on `gpu-ab:gsm8k`"),
    VllmFault(
        "gumbel-fp32-log-noise", 45996,
        "V2's fp32 Gumbel sampler draws its noise as -log(-log(u)) again, not "
        "-log(-log1p(-u)): the same uniforms give other noise (the winning tail back at "
        "u -> 1, capped near 16.6), so a seeded request samples other tokens. Meant for "
        "token_agreement on the seeded `sampled` workload in a two-build run (the fp64 path, "
        "use_fp64_gumbel, is untouched)",
        ("0.26.0",),
        (SourcePatch(
            "vllm.v1.worker.gpu.sample.gumbel", "gumbel_block_argmax",
            old="gumbel_noise = -tl.log(-tldevice.log1p(-u))",
            new="gumbel_noise = -tl.log(-tl.log(u))  # mrbench fault gumbel-fp32-log-noise "
                "(vLLM PR 45996 reverted)",
            # the rejection sampler's kernels call it by this name too
            rebind=("vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils",)),),
        coverage=_ONE_RUNNER + "token_agreement on `gpu-ab:sampled`"),
    VllmFault(
        "prefill-kernel-every-step", 34780,
        "V2's prepare_inputs launches the prepare-prefill Triton kernel on every step again, "
        "decode-only steps included, where each of its programs returns at once: one more "
        "kernel launch per decode step in the prepare phase and no other change (no torch op, "
        "so the op counts do not see it). Meant for launches_vs_baseline (CUDA kernel "
        "launches per step per phase, side against side) in a two-build run",
        ("0.26.0",),
        (SourcePatch(
            "vllm.v1.worker.gpu.model_runner", "GPUModelRunner.prepare_inputs",
            old="if np.any(is_prefilling_np):",
            new="if True:  # mrbench fault prefill-kernel-every-step (vLLM PR 34780 "
                "reverted): decode-only steps launch it too"),),
        coverage=_ONE_RUNNER + "launches_vs_baseline on `gpu-ab:gsm8k`"),
)}


_serial = itertools.count(1)


def coverage_faults() -> dict[str, str]:
    """{fault: the entries that reach it} for the faults `faults` runs only when named."""
    return {n: f.coverage for n, f in FAULTS.items() if f.coverage}


def inert(installed: str | None) -> dict[str, str]:
    """{fault: why it has nothing to catch} on the installed release."""
    return {n: why for n, f in FAULTS.items() if (why := f.inert_on(installed))}


def check(names: tuple[str, ...], installed: str | None) -> None:
    """BadInput (one line) for an unknown fault or a vLLM release it was not written for."""
    for n in names:
        if n not in FAULTS:
            raise BadInput(f"unknown vllm fault {n!r}; known: {', '.join(sorted(FAULTS))}")
        f = FAULTS[n]
        if installed not in f.versions:
            raise BadInput(f"vllm fault {n!r} (PR {f.pr}) is written against vLLM "
                           f"{', '.join(f.versions)}; installed is {installed or 'none'}")


def _owner_and_function(p: SourcePatch) -> tuple[Any, str, Any]:
    mod = importlib.import_module(p.module)
    *path, name = p.qualname.split(".")
    owner: Any = mod
    for part in path:
        owner = getattr(owner, part)
    return owner, name, _source_function(getattr(owner, name))


def _source_function(obj: Any) -> Any:
    """The Python function whose source a patch edits: the one a decorator wraps
    (`__wrapped__`), or the one a `@triton.jit` kernel keeps as `.fn` (a Triton
    JITFunction has no `__wrapped__`, and its source is its function's). Its source
    carries its decorators, so recompiling it makes a new kernel object, which Triton
    compiles, and hashes for its cache, from the patched text."""
    fn = inspect.unwrap(obj)
    inner = getattr(fn, "fn", None)
    if not inspect.isfunction(fn) and inspect.isfunction(inner):
        return inner
    return fn


def patched_source(source: str, p: SourcePatch) -> str:
    """`source` with the line `p.old` replaced by `p.new` (kept at its indentation);
    ValueError unless `p.old` is there exactly once."""
    lines = source.splitlines()
    hits = [i for i, ln in enumerate(lines) if ln.strip() == p.old.strip()]
    if len(hits) != 1:
        raise ValueError(f"{p.qualname}: the line to replace was found {len(hits)} times "
                         f"(expected once): {p.old!r}")
    i = hits[0]
    indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
    lines[i:i + 1] = [indent + ln for ln in p.new.splitlines()]
    return "\n".join(lines) + "\n"


def _apply_patch(p: SourcePatch) -> None:
    owner, name, fn = _owner_and_function(p)
    new_fn = _recompiled(fn, patched_source(textwrap.dedent(inspect.getsource(fn)), p),
                         f"<mrbench fault: {p.qualname} #{next(_serial)}>")
    setattr(owner, name, new_fn)
    for mod in p.rebind:
        m = importlib.import_module(mod)
        if getattr(m, name, None) is None:
            raise ValueError(f"{p.qualname}: {mod} has no {name} to rebind")
        setattr(m, name, new_fn)


def _recompiled(fn: Any, new_src: str, filename: str) -> Any:
    """`fn` compiled again from `new_src`, in its module's namespace, with its own defaults
    and closure cells. A method that calls zero-argument `super()` closes over `__class__`:
    its source is compiled in a class body of its own class's name (so private names mangle
    as before), and the code object so made is given the original's cells, so `super()`
    still finds the real class. Other closures are refused."""
    frees = fn.__code__.co_freevars
    if frees not in ((), ("__class__",)):
        raise ValueError(f"{fn.__qualname__} closes over {frees}; only a method's "
                         "__class__ (zero-argument super()) can be given back")
    owner_name = fn.__qualname__.split(".")[-2] if frees else ""
    src = (f"class {owner_name}:\n{textwrap.indent(new_src, '    ')}" if frees else new_src)
    # a file name of its own, its text in linecache: tracebacks and sync-check warnings
    # show the patched line, and a second patch of the same function can read it back
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns: dict[str, Any] = {}
    exec(compile(src, filename, "exec"), fn.__globals__, ns)
    if not frees:
        return ns[fn.__name__]
    made = ns[owner_name].__dict__[fn.__name__]
    code = getattr(made, "__func__", made).__code__
    new_fn = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__,
                                fn.__closure__)
    new_fn.__kwdefaults__ = fn.__kwdefaults__
    new_fn.__qualname__ = fn.__qualname__
    new_fn.__dict__.update(fn.__dict__)
    return new_fn


_APPLIED: set[str] = set()      # the faults patched in this process (a forked worker
                                # inherits the set with the patches)


def apply(names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Apply the faults in this process (the engine's, or a tensor-parallel rank's); what
    was patched, for the manifest. A fault already patched here is not patched again."""
    import vllm  # lazy: vLLM is optional (the vllm target only)
    check(names, getattr(vllm, "__version__", None))
    done = []
    for n in names:
        if n in _APPLIED:
            continue
        _APPLIED.add(n)
        f = FAULTS[n]
        for p in f.patches:
            _apply_patch(p)
            done.append(dict(fault=n, pr=f.pr, function=f"{p.module}.{p.qualname}",
                             old=p.old, new=p.new))
    return done
