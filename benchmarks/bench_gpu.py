"""The bundled runner on a GPU against `transformers` generate, in one run on one device.

    PYTHONPATH=. python benchmarks/bench_gpu.py [--out DIR] [--models bundled 1b]
        [--batches 1 8 64] [--prompt-len 128] [--max-tokens 128] [--repeats 3]
        [--systems v2 v2-eager v1 hf] [--hf-compile] [--no-probes]
        [--spike-prompt-lens 3 48] [--spike-reps 2]

Results and the command used for docs/performance.md are recorded there.

Systems, each on the same prompts (random token ids, greedy, every request generates
exactly --max-tokens tokens):
  v2        runner_impl V2, uniform-decode batches replayed from CUDA graphs
  v2-async  the same with async scheduling: step n+1 is scheduled and queued while the
            device runs step n (vLLM's default; the host's work hides behind the device's)
  v2-eager  runner_impl V2 with enforce_eager (same code, no graphs)
  v1        runner_impl V1 (the eager reference runner)
  hf        transformers `generate`, static KV cache, auto-compile off (eager)
  hf-compile  the same with transformers' auto-compile (torch.compile, reduce-overhead);
            only with --hf-compile (compiling costs minutes)
Models: the bundled default model, and a random-weight Llama of ~1.1B parameters (hidden
2048, 16 layers, 32 heads, 8 KV heads, intermediate 8192, vocab 32000) written in HF format
under /tmp at run time (never committed), so runner_impl and transformers load the same
weights. bf16 everywhere.

Figures per (model, batch, system): output tokens/s over the whole generate call (prefill
included); decode tokens/s = batch / mean decode-step period; per-step P50/P99 of the
decode-step period (time between consecutive decode-step completions: host clock for
runner_impl, whose steps end in a sync; CUDA events recorded in a logits processor for
transformers, whose steps need not). Repeats are interleaved across systems after one
discarded round each.

Also, unless --no-probes: hot-path syncs per step of V2 (clean and with the seq-lens-sync
fault) counted by mrbench's profiler collector, and the first-prefill latency spike of the
warmup-short-prefill fault (each probe in a fresh process: kernel loading and Triton's JIT
are per process; the last pair of probes runs with an empty Triton cache).

Writes bench_gpu.json and bench_gpu.md to --out (default $OUT, else results/bench_gpu).
Without CUDA it prints why and exits 0 (nothing to measure).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mrbench.runner_impl import LLM, SamplingParams  # noqa: E402
from mrbench.runner_impl.default_model import DEFAULT_MODEL_DIR  # noqa: E402
from mrbench.runner_impl.model import triton_base  # noqa: E402
from mrbench.runner_impl.model.random_presets import SIDECAR, Preset, write_model  # noqa: E402

# Llama-3.2-1B's layer shapes with a 32k vocabulary and a 2048-token context
LLAMA_1B = Preset(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                  num_key_value_heads=8, intermediate_size=8192, vocab_size=32000,
                  max_position_embeddings=2048, tie_word_embeddings=False, rope_theta=10000.0,
                  init_std=0.02, dtype="bfloat16")


# ---- models ---------------------------------------------------------------------------
def make_random_llama(path: Path, shape: Preset, seed: int = 0) -> Path:
    """A random Llama of `shape` in bf16, drawn on the GPU, made once and reused."""
    if (path / SIDECAR).is_file():
        return path
    return write_model(path, shape, name=path.name, seed=seed, device="cuda")


def num_params(model_dir: Path) -> int:
    from safetensors import safe_open
    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        return sum(int(np.prod(f.get_slice(n).get_shape())) for n in f.keys())


# ---- runner_impl ----------------------------------------------------------------------
class RunnerSystem:
    def __init__(self, model_dir: Path, runner: str, eager: bool, max_batch: int,
                 max_model_len: int, max_tokens_per_step: int,
                 async_scheduling: bool = False) -> None:
        t0 = time.perf_counter()
        self.llm = LLM(model_dir, runner=runner, device="cuda", dtype="bfloat16",
                       max_num_seqs=max_batch, max_num_batched_tokens=max_tokens_per_step,
                       max_model_len=max_model_len, enforce_eager=eager,
                       async_scheduling=async_scheduling)
        self.startup_s = time.perf_counter() - t0

    def run(self, prompts: list[list[int]], n: int) -> dict:
        llm = self.llm
        sp = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
        k0 = len(llm.step_records)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        outs = llm.generate(prompts, sp)
        wall = time.perf_counter() - t0
        recs = llm.step_records[k0:]
        ends = [t0] + [r.t_end for r in recs]
        B = len(prompts)                                    # decode: one token per request
        periods = [ends[i + 1] - ends[i] for i, r in enumerate(recs)
                   if r.num_reqs == B and r.num_tokens == B and r.num_new_reqs == 0]
        toks = [o.token_ids for o in outs]
        assert all(len(t) == n for t in toks)
        return dict(wall_s=wall, output_tokens=sum(map(len, toks)), decode_periods_s=periods,
                    tokens=toks)


# ---- transformers ---------------------------------------------------------------------
class HFSystem:
    def __init__(self, model_dir: Path, compile_: bool) -> None:
        import transformers
        t0 = time.perf_counter()
        try:
            m = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
        except TypeError:                                    # transformers < 4.56
            m = transformers.AutoModelForCausalLM.from_pretrained(model_dir,
                                                                  torch_dtype=torch.bfloat16)
        self.model = m.to("cuda").eval()
        self.compile = compile_
        self.attn = getattr(self.model.config, "_attn_implementation", None)
        self.startup_s = time.perf_counter() - t0

    def run(self, prompts: list[list[int]], n: int) -> dict:
        from transformers import LogitsProcessor, LogitsProcessorList

        events: list[torch.cuda.Event] = []

        class Stamp(LogitsProcessor):        # called once per generated token, on the stream
            def __call__(self, input_ids, scores):
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                events.append(ev)
                return scores

        ids = torch.tensor(prompts, dtype=torch.long, device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                min_new_tokens=n, do_sample=False, cache_implementation="static",
                disable_compile=not self.compile, pad_token_id=0,
                logits_processor=LogitsProcessorList([Stamp()]))
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        periods = [a.elapsed_time(b) / 1e3 for a, b in zip(events, events[1:])]
        toks = out[:, ids.shape[1]:].tolist()
        return dict(wall_s=wall, output_tokens=sum(map(len, toks)), decode_periods_s=periods,
                    tokens=toks)


# ---- the comparison -------------------------------------------------------------------
def summarize(runs: list[dict], batch: int) -> dict:
    periods = np.concatenate([r["decode_periods_s"] for r in runs]) * 1e3
    return dict(
        output_tok_s=float(np.median([r["output_tokens"] / r["wall_s"] for r in runs])),
        decode_tok_s=float(batch / (periods.mean() / 1e3)) if len(periods) else None,
        step_p50_ms=float(np.percentile(periods, 50)) if len(periods) else None,
        step_p99_ms=float(np.percentile(periods, 99)) if len(periods) else None,
        decode_steps=int(len(periods)), wall_s=float(np.median([r["wall_s"] for r in runs])))


def greedy_agreement(a: list[list[int]], b: list[list[int]]) -> float:
    """Mean fraction of each request's tokens that match before the first divergence."""
    fr = []
    for x, y in zip(a, b):
        k = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
        fr.append(k / max(len(x), 1))
    return float(np.mean(fr))


def bench_model(name: str, model_dir: Path, a: argparse.Namespace, log) -> dict:
    max_b = max(a.batches)
    P, N = a.prompt_len, a.max_tokens
    max_len = P + N + 8
    systems: dict = {}
    startup = {}
    for sysname in a.systems:
        if sysname == "v2":
            s = RunnerSystem(model_dir, "v2", False, max_b, max_len, max_b * P)
        elif sysname == "v2-async":
            s = RunnerSystem(model_dir, "v2", False, max_b, max_len, max_b * P, True)
        elif sysname == "v2-eager":
            s = RunnerSystem(model_dir, "v2", True, max_b, max_len, max_b * P)
        elif sysname == "v1":
            s = RunnerSystem(model_dir, "v1", True, max_b, max_len, max_b * P)
        elif sysname in ("hf", "hf-compile"):
            s = HFSystem(model_dir, sysname == "hf-compile")
        else:
            raise SystemExit(f"unknown system {sysname}")
        systems[sysname] = s
        startup[sysname] = s.startup_s
        log(f"[{name}] {sysname} ready in {s.startup_s:.1f}s")
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    # As vLLM's engine does after start-up: what is alive now (models, graphs, compiled
    # code) leaves the cyclic collector's reach, so a full collection during a run does not
    # walk it (a pause of milliseconds in some step). The same for every system.
    gc.collect()
    gc.freeze()
    rows = []
    for B in a.batches:
        rng = random.Random(B)
        prompts = [[rng.randrange(3, vocab) for _ in range(P)] for _ in range(B)]
        runs: dict[str, list[dict]] = {s: [] for s in systems}
        first_tokens = {}
        for s, sys_ in systems.items():                # discarded round (first-seen shapes)
            first_tokens[s] = sys_.run(prompts, N)["tokens"]
        for _ in range(a.repeats):
            for s, sys_ in systems.items():
                runs[s].append(sys_.run(prompts, N))
        for s in systems:
            row = dict(model=name, batch=B, system=s, **summarize(runs[s], B))
            if "hf" in first_tokens and s != "hf":
                row["greedy_agreement_vs_hf"] = greedy_agreement(first_tokens[s], first_tokens["hf"])
            rows.append(row)
            log(f"[{name}] B={B:<3} {s:<10} out {row['output_tok_s']:>9.0f} tok/s  decode "
                f"{row['decode_tok_s'] or 0:>9.0f} tok/s  P50 {row['step_p50_ms'] or 0:7.2f} ms"
                f"  P99 {row['step_p99_ms'] or 0:7.2f} ms")
    extra = {}
    if "v2" in systems:
        cg = systems["v2"].llm.cores[0].runner.cudagraphs
        extra = dict(v2_graph_sizes=cg.sizes if cg else None,
                     v2_graph_replays=cg.num_replays if cg else 0)
    if "hf" in systems:
        extra["hf_attn_implementation"] = systems["hf"].attn
    for s in list(systems):
        del systems[s]
    gc.unfreeze()
    gc.collect()
    torch.cuda.empty_cache()
    return dict(rows=rows, startup_s=startup, **extra)


# ---- probes: hot-path syncs, first-prefill spike --------------------------------------
def sync_probe(model_dir: Path, faults: list[str]) -> dict:
    """V2 serving a mixed workload under mrbench's profiler collector (as `mrbench run`
    does: after warmup), syncs per step in the measured phases, from CUDA runtime events."""
    from mrbench.harness.measure.profiler import count_per_step, profiled
    from mrbench.harness.measure.phases import HOT_PHASES, PHASE_LABELS, STEP_LABEL
    from mrbench.harness.run.targets.bundled import label_phases
    llm = LLM(model_dir, device="cuda", max_num_seqs=16, max_num_batched_tokens=256,
              num_speculative_tokens=1, faults=faults)
    label_phases(llm)                                      # the harness's phase ranges
    rng = random.Random(1)
    vocab = llm.model_config.vocab_size
    prompts = [[rng.randrange(3, vocab) for _ in range(rng.randint(8, 60))] for _ in range(24)]
    sp = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    llm.generate(prompts[:4], sp)                           # one round before counting
    with profiled("cuda") as prof:
        llm.generate(prompts, sp)
    rows = count_per_step(prof.events, STEP_LABEL, PHASE_LABELS, "cuda")
    hot = [r["syncs_hot"] for r in rows]
    calls = {c: sum(r[c] for r in rows) for c in ("cudaStreamSynchronize", "cudaEventSynchronize",
                                                  "cudaDeviceSynchronize", "cudaMemcpy",
                                                  "aten::_local_scalar_dense")}
    return dict(faults=faults, steps=len(rows), syncs_hot_per_step=float(np.mean(hot)),
                min_syncs_hot=int(min(hot)), max_syncs_hot=int(max(hot)),
                per_phase={p: sum(r[f"syncs_{p}"] for r in rows) for p in HOT_PHASES},
                sync_calls_in_steps=calls,
                graph_replays=llm.cores[0].runner.cudagraphs.num_replays)


def spike_probe(model_dir: Path, faults: list[str], prompt_len: int, n: int = 8) -> dict:
    """Fresh process: first serving prefill vs the later ones, k = 1 (where the fault bites)."""
    llm = LLM(model_dir, device="cuda", max_num_seqs=8, max_num_batched_tokens=512,
              num_speculative_tokens=1, faults=faults)
    rng = random.Random(2)
    vocab = llm.model_config.vocab_size
    sp = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    for _ in range(n):
        llm.generate([[rng.randrange(3, vocab) for _ in range(prompt_len)]], sp)
    pre = [(r.t_end - r.t_start) * 1e3 for r in llm.step_records
           if r.dispatch_key and r.dispatch_key[0] == "mixed"]
    warm = sorted({k[0] for p, k in llm.cores[0].runner.dispatch_log if p == "warmup"})
    return dict(faults=faults, prompt_len=prompt_len, prefill_ms=pre, first_ms=pre[0],
                triton_cache=os.environ.get("TRITON_CACHE_DIR", "default"),
                later_median_ms=float(np.median(pre[1:])),
                ratio=float(pre[0] / np.median(pre[1:])), warmup_kinds=warm)


def run_probe_subprocess(args: list[str], cold_triton: bool = False) -> dict:
    """cold_triton: an empty Triton cache (a fresh deployment: the kernel is compiled, not
    loaded from disk)."""
    import tempfile
    cmd = [sys.executable, str(Path(__file__).resolve()), "--probe-json", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if cold_triton:
        env["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cold-")
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if p.returncode:
        return dict(error=p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---- report ---------------------------------------------------------------------------
def markdown(res: dict) -> str:
    env = res["env"]
    a = res["args"]
    out = [f"Device: {env['device']}; torch {env['torch']}; transformers {env['transformers']}; "
           f"CUDA {env['cuda']}; driver {env.get('driver')}; Triton {env.get('triton')}, "
           f"PDL {'on' if env.get('triton_pdl') else 'off'}.",
           f"Workload: batch B of random prompts of {a['prompt_len']} tokens, "
           f"{a['max_tokens']} greedy output tokens each (ignore EOS), bf16; "
           f"{a['repeats']} interleaved repeats after one discarded round.", ""]
    for m in res["models"].values():
        n = m["params"]
        out.append(f"**{m['label']}** ({n / 1e9:.2f} B parameters)" if n >= 1e8 else
                   f"**{m['label']}** ({n / 1e6:.1f} M parameters)")
        out.append("")
        # Decode tok/s relative to each transformers system the run has.
        refs = [n for n in ("hf", "hf-compile") if any(r["system"] == n for r in m["rows"])]
        out.append("| batch | system | output tok/s | decode tok/s | step P50 ms | step P99 ms |"
                   + "".join(f" decode tok/s vs {n} |" for n in refs))
        out.append("|---:|---|---:|---:|---:|---:|" + "---:|" * len(refs))
        base = {(r["system"], r["batch"]): r["decode_tok_s"] for r in m["rows"]}
        f = lambda v, spec: "n/a" if v is None else format(v, spec)  # noqa: E731
        for r in m["rows"]:
            rels = []
            for n in refs:
                b = base.get((n, r["batch"]))
                rels.append(f"{r['decode_tok_s'] / b:.2f}x" if b and r["decode_tok_s"] else "")
            out.append(f"| {r['batch']} | {r['system']} | {f(r['output_tok_s'], '.0f')} | "
                       f"{f(r['decode_tok_s'], '.0f')} | {f(r['step_p50_ms'], '.2f')} | "
                       f"{f(r['step_p99_ms'], '.2f')} |" + "".join(f" {x} |" for x in rels))
        out.append("")
    if res.get("syncs"):
        out.append("| V2, k=1, profiled serving pass | steps | hot-path syncs/step (mean, min-max) |")
        out.append("|---|---:|---:|")
        for s in res["syncs"]:
            if "error" in s:
                out.append(f"| error | | {s['error'][-200:]!r} |")
                continue
            out.append(f"| {'+'.join(s['faults']) or 'clean'} | {s['steps']} | "
                       f"{s['syncs_hot_per_step']:.2f} ({s['min_syncs_hot']}-{s['max_syncs_hot']}) |")
        out.append("")
    if res.get("spikes"):
        out.append("| first-prefill probe (fresh process, k=1) | Triton cache | prompt |"
                   " first prefill ms | later prefills, median ms | ratio |")
        out.append("|---|---|---:|---:|---:|---:|")
        for s in res["spikes"]:
            if "error" in s:
                out.append(f"| error | | | | | {s['error'][-200:]!r} |")
                continue
            out.append(f"| {'+'.join(s['faults']) or 'clean'} | "
                       f"{'empty' if s.get('cold_triton_cache') else 'warm'} | {s['prompt_len']} | "
                       f"{s['first_ms']:.2f} | {s['later_median_ms']:.2f} | {s['ratio']:.1f}x |")
        out.append("")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--models", nargs="+", default=["bundled", "1b"], choices=["bundled", "1b"])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8, 64])
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--systems", nargs="+", default=["v2", "v2-async", "v2-eager", "v1", "hf"])
    ap.add_argument("--hf-compile", action="store_true", help="add transformers auto-compile")
    ap.add_argument("--no-probes", action="store_true")
    ap.add_argument("--spike-prompt-lens", nargs="+", type=int, default=[3, 48])
    ap.add_argument("--spike-reps", type=int, default=2)
    ap.add_argument("--model-cache", default="/tmp/mrbench-bench-models")
    ap.add_argument("--probe-json", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_gpu: skipped: torch sees no CUDA device (this benchmark measures GPU "
              "execution; run it on a machine with one)")
        return 0
    if a.probe_json:                                   # internal: one probe, fresh process
        kind, model, faults, plen = a.probe_json
        faults = [f for f in faults.split(",") if f]
        res = spike_probe(Path(model), faults, int(plen)) if kind == "spike" else \
            sync_probe(Path(model), faults)
        print(json.dumps(res))
        return 0
    if a.hf_compile and "hf-compile" not in a.systems:
        a.systems.append("hf-compile")
    out_dir = Path(a.out or os.environ.get("OUT") or ROOT / "results" / "bench_gpu")
    out_dir.mkdir(parents=True, exist_ok=True)
    import transformers
    drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip() or None
    env = dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
               transformers=transformers.__version__, cuda=torch.version.cuda, driver=drv,
               python=platform.python_version(), command=" ".join(sys.argv),
               triton=getattr(triton_base.triton, "__version__", None),
               triton_pdl=triton_base.pdl())
    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:7.1f}s] {msg}", flush=True)

    log(f"env {env}")
    model_dirs = {}
    if "bundled" in a.models:
        model_dirs["bundled"] = (DEFAULT_MODEL_DIR, "bundled default model (gsm8k-tiny)")
    if "1b" in a.models:
        d = make_random_llama(Path(a.model_cache) / "llama-1b-random", LLAMA_1B)
        model_dirs["1b"] = (d, "random-weight Llama, 1B shape (hidden 2048, 16 layers, "
                               "32 heads / 8 KV heads, intermediate 8192, vocab 32000)")
        log(f"1B model at {d}")
    res = dict(env=env, args=vars(a), models={}, syncs=[], spikes=[])
    for name, (d, label) in model_dirs.items():
        r = bench_model(name, Path(d), a, log)
        res["models"][name] = dict(label=label, params=num_params(Path(d)), **r)
        (out_dir / "bench_gpu.json").write_text(json.dumps(res, indent=2))
    if not a.no_probes:
        probe_model = str(DEFAULT_MODEL_DIR)
        for faults in ("", "seq-lens-sync"):
            res["syncs"].append(run_probe_subprocess(["sync", probe_model, faults, "0"]))
            log(f"sync probe {faults or 'clean'}: {res['syncs'][-1]}")
        for plen in a.spike_prompt_lens:
            for rep in range(a.spike_reps + 1):
                for faults in ("", "warmup-short-prefill"):
                    cold = rep == a.spike_reps          # last: an empty Triton cache
                    res["spikes"].append(run_probe_subprocess(["spike", probe_model, faults,
                                                               str(plen)], cold))
                    res["spikes"][-1]["cold_triton_cache"] = cold
                    s = res["spikes"][-1]
                    log(f"spike probe {faults or 'clean'} plen {plen}: "
                        f"{ {k: v for k, v in s.items() if k != 'prefill_ms'} }")
    res["elapsed_s"] = time.perf_counter() - t_start
    (out_dir / "bench_gpu.json").write_text(json.dumps(res, indent=2, default=str))
    md = markdown(res)
    (out_dir / "bench_gpu.md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
