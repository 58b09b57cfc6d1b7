#!/usr/bin/env bash
# Real vLLM V2 against V1 on a GPU machine: the acceptance runs, then the GPU tests on them.
# Usage: scripts/gpu/vllm_acceptance.sh OUT_DIR [STEPS]   (STEPS: comma list of smoke,
#   fault, quick, eagle, warmup, reference, matrix, pd, pdeagle, pdfault, tp, pd2, scale,
#   tests; default smoke,fault,quick,eagle,warmup,tests). Needs vLLM importable (pip, or the kit in ../shared/vllm-gpu:
#   `source env.sh`) and CUDA. Writes OUT_DIR/runs/<name>/ (results), <name>.stdout/.stderr,
#   OUT_DIR/timings.txt, OUT_DIR/pytest.log, OUT_DIR/runs.tgz.
#   smoke  `run smoke` V2 vs V1, clean: must pass
#   fault  `run smoke --fault seq-lens-sync --vllm-sync-check warn` (vLLM PR 40654 put back
#          into V2's prepare_inputs): must fail syncs_per_step and sync_check_warnings
#   quick  `run quick --vllm-sync-check warn`, clean, timed: must pass (<= 10 min on an H100)
#   eagle  `run spec-eagle`: V2 spec decode with the bundled EAGLE head, k = 2 and 4
#   warmup `faults warmup-eagle --fault warmup-short-prefill` (vLLM PR 40746 put back into
#          V2's warmup_kernels; the clean run first): clean passes, the fault fails
#          unwarmed_dispatch at k = 1
#   reference  `run quick --save-reference`: this GPU build's op counts, copied to
#          OUT_DIR/op-counts/ (commit them under results/baselines/op-counts/)
#   matrix `faults quick` for the vllm faults mirror-increment and accept-count-cat-argmax
#          (the clean run first): each must be caught, the clean run must pass
#   pd     `run pd --vllm-sync-check warn`: GSM8K and a Mooncake replay through a PD pair per
#          side (prefill + decode engine, vLLM's example KV connector), clean: must pass
#   pdfault `faults pd-eagle --fault stale-slot-state` (vLLM PR 39833's line put back into
#          V2's RequestState.add_request) under PD with EAGLE k = 2; the clean run first
#   tp     (two GPUs) `run smoke --engine-arg tensor_parallel_size=2`, clean: must pass with
#          counts on both ranks; then with `--fault seq-lens-sync` (PR 40654 in every rank):
#          must fail syncs_per_step[rank0] and syncs_per_step[rank1]
#   pdeagle `run pd-eagle`: a PD pair with EAGLE k = 2 per side, each engine's runner in a
#          worker of its own, steps timed there; clean: must pass
#   pd2    (two GPUs) `run pd --pd-gpus 0,1` and `run pd-eagle --pd-gpus 0,1`: each PD pair's
#          prefill runner on GPU 0 and its decode runner on GPU 1, each in its own worker
#          process, KV through the pair's connector; clean: must pass
#   scale  `mrbench model make --preset llama-1b` (random weights, on the GPU), then `run
#          scale --model` on it at TP 1 (and TP 2 with `tp`): GSM8K waves, chunked prefill,
#          seeded sampling, counts on every rank; step and engine-start times beside the
#          tiny model's; accuracy reads "not measured: random weights"
#   tests  tests/vllm/test_vllm_gpu.py against those run directories (MRBENCH_VLLM_GPU_RUNS)
# Env: PIN ("--pin-cpus 1-14 --canary-cpu 15": flags added to every run). After each run its
#   engine starts are listed with where their time went (the manifest's engines.starts).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=$(realpath -m "${1:?usage: vllm_acceptance.sh OUT_DIR [STEPS]}")
steps=",${2:-smoke,fault,quick,eagle,warmup,tests},"
py=${PYTHON:-python3}
mkdir -p "$out/runs"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $py -c "import torch, vllm; print('torch', torch.__version__, '| vllm', vllm.__version__)"
} > "$out/env.txt" 2>&1
cat "$out/env.txt"

read -ra pin <<< "${PIN:-}"
starts() {                                # starts RUN_DIR: each engine start and its phases
  $py - "$1" <<'PY' | tee -a "$out/timings.txt"
import json, sys
from pathlib import Path
m = Path(sys.argv[1]) / "manifest.json"
for s in (json.loads(m.read_text()).get("engines") or {}).get("starts", []) if m.is_file() else []:
    ph = {k: v for k, v in (s.get("phases") or {}).items() if v is not None}
    print(f"  start {s['side']:9s} {','.join(s['workloads'])[:28]:28s} {s['start_s']:7.1f} s",
          " ".join(f"{k}={v:.1f}" for k, v in ph.items()), s.get("compile_cache_writes") or "")
PY
}
run() {                                   # run NAME ARGS...: one mrbench run, timed
  local name=$1; shift
  local t0=$SECONDS
  $py -m mrbench run "$@" --target vllm --device cuda --candidate v2 --baseline v1 \
      "${pin[@]}" --out "$out/runs/$name" > "$out/runs/$name.stdout" \
      2> "$out/runs/$name.stderr"
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - t0)) s ($*)" | tee -a "$out/timings.txt"
  starts "$out/runs/$name"
  grep -E "^(gsm8k|spec|warmup|trace|verdict|FAILED|UNSUPPORTED)" "$out/runs/$name.stdout" | head -40
  tar czf "$out/runs.tgz" -C "$out" runs 2>/dev/null   # after every run: a kill keeps these
}
[[ $steps == *,smoke,* ]] && run smoke-clean smoke
[[ $steps == *,fault,* ]] && run smoke-fault smoke --fault seq-lens-sync --vllm-sync-check warn
[[ $steps == *,quick,* ]] && run quick-clean quick --vllm-sync-check warn
[[ $steps == *,eagle,* ]] && run spec-eagle spec-eagle
[[ $steps == *,pd,* ]] && run pd-clean pd --vllm-sync-check warn
[[ $steps == *,pdeagle,* ]] && run pd-eagle pd-eagle
faults() {                                # faults NAME SUITE FAULT...: clean, then each
  local name=$1 suite=$2; shift 2
  local t0=$SECONDS args=()
  for f in "$@"; do args+=(--fault "$f"); done
  $py -m mrbench faults "$suite" --target vllm --device cuda --candidate v2 --baseline v1 \
      "${args[@]}" "${pin[@]}" --out "$out/runs/$name" > "$out/runs/$name.stdout" \
      2> "$out/runs/$name.stderr"
  echo "$name: exit $? in $((SECONDS - t0)) s (faults $suite $*)" | tee -a "$out/timings.txt"
  cat "$out/runs/$name.stdout"
  tar czf "$out/runs.tgz" -C "$out" runs 2>/dev/null
}
[[ $steps == *,warmup,* ]] && faults warmup-faults warmup-eagle warmup-short-prefill
if [[ $steps == *,reference,* ]]; then
  run quick-reference quick --save-reference
  mkdir -p "$out/op-counts" && cp results/baselines/op-counts/vllm-* "$out/op-counts/" 2>/dev/null
  ls -l "$out/op-counts"
fi
[[ $steps == *,pdfault,* ]] && faults pd-faults pd-eagle stale-slot-state
if [[ $steps == *,tp,* ]]; then
  run tp2-clean smoke --engine-arg tensor_parallel_size=2
  run tp2-fault smoke --engine-arg tensor_parallel_size=2 --fault seq-lens-sync
fi
if [[ $steps == *,pd2,* ]]; then
  run pd2-clean pd --pd-gpus 0,1
  run pd2-eagle pd-eagle --pd-gpus 0,1
fi
if [[ $steps == *,scale,* ]]; then
  m1b=${MODEL_1B:-/tmp/mrbench-llama-1b}
  [[ -d $m1b ]] || $py -m mrbench model make --preset llama-1b --device cuda --out "$m1b" \
      | tee -a "$out/timings.txt"
  run scale-1b-tp1 scale --model "$m1b"
  [[ $steps == *,tp,* ]] && run scale-1b-tp2 scale --model "$m1b" \
      --engine-arg tensor_parallel_size=2
fi
[[ $steps == *,matrix,* ]] && faults faults-quick quick mirror-increment accept-count-cat-argmax
if [[ $steps == *,tests,* ]]; then
  MRBENCH_VLLM_GPU_RUNS="$out/runs" $py -m pytest -q -p no:cacheprovider \
      tests/vllm/test_vllm_gpu.py 2>&1 | tee "$out/pytest.log" | tail -25
fi
tar czf "$out/runs.tgz" -C "$out" runs 2>/dev/null
