#!/usr/bin/env bash
# Where the wave-to-wave noise of the bundled target's latency gates comes from on a GPU
# machine (docs/detection-power.md, "Noise anatomy"). A/A campaigns of the gsm8k entry in
# several shapes, each run's per-step table kept, while nvidia-smi samples the GPU's clocks,
# power and utilisation every 50 ms, so the per-wave medians can be set against the GPU's
# state offline: `python research/wave_noise.py DIR...` reads the packed runs back.
# Usage: research/noise_study.sh OUT_DIR [STEPS]   (STEPS: comma list, default
#   aa16,wide,long). Needs CUDA and the kit's env (../shared/vllm-gpu). Poll with
#   scripts/gpu/pack_runs.sh OUT_DIR/runs DEST.tgz; OUT_DIR/smi.csv and OUT_DIR/clock.txt
#   are plain files.
#   aa16   `calibrate` (V2 against V2, -n NOISE_N, default 8) of gpu-quick's gsm8k entry as it
#          was until 2026-11-25: 16 waves of 16 prompts on 16 slots
#   wide   1024 prompts in 16 waves of 64 on 64 slots: a GPU-heavier step
#   long   waves of 16 on 16 slots, 64 of them (1024 prompts): four times the waves
#   aa16pin1, aa16pin2, longpin: aa16 (long) with every mrbench process (the harness and both
#          engines) on one fixed CPU (PIN1, default 4) or two (PIN2, default 4,5) with
#          --pin-cpus (the 2026-11-25 figures were taken with taskset, the same affinity)
#   bursts `calibrate gpu-quick:gsm8k --baseline v2 --candidate v2 -n NOISE_N_BURSTS` (default
#          3) on PIN1 while research/cpu_probe.py, on CPU PROBE_CPU (default 0), samples
#          who else ran on PIN1 into OUT_DIR/probe.jsonl, with a thread listing mid-run in
#          OUT_DIR/threads.txt: what the 5-8 ms step bursts are (docs/detection-power.md,
#          "Bursts"); the steps' own clocks are in each run's steps.csv
#   vllm   `run gpu-quick:gsm8k --target vllm --baseline v2 --candidate v2
#          --fault slow-step:100` (the sync-in-sample lead of 2026-11-24)
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:?usage: noise_study.sh OUT_DIR [STEPS]}")
steps=",${2:-aa16,wide,long},"
n=${NOISE_N:-8}
py=${PYTHON:-python3}
mkdir -p "$out/runs"
export MRBENCH_DATA_DIR=$(realpath -m "${MRBENCH_DATA_DIR:-.gpudata}")
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
  $py -c "import torch; print('torch', torch.__version__)"; nproc; lscpu | head -25
  git rev-parse HEAD 2>/dev/null
} > "$out/env.txt" 2>&1
# one instant on both clocks: steps carry time.perf_counter() (CLOCK_MONOTONIC), nvidia-smi
# wall-clock timestamps
$py -c "import time; print(f'{time.time():.6f} {time.perf_counter():.6f}')" > "$out/clock.txt"
q=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,temperature.gpu
nvidia-smi --query-gpu=$q,clocks_event_reasons.active \
    --format=csv,noheader,nounits -lms 50 > "$out/smi.csv" 2>/dev/null &
smi=$!
trap 'kill $smi 2>/dev/null' EXIT

suite() {                     # suite NAME WAVE_SIZE LIMIT: a one-entry A/A suite
  cat > "$out/$1.yaml" <<EOF
name: $1
description: noise study shape (research/noise_study.sh), gpu-quick's bars
thresholds: {alpha: 0.05, latency_rel: 0.05, median_rel: 0.03}
workloads:
  - id: gsm8k
    workload: gsm8k
    params: {mode: colocated, limit: $3, max_num_seqs: $2, wave_size: $2, profile_limit: 8}
EOF
  echo "$out/$1.yaml"
}
step() {                       # step NAME ARGS...: one mrbench command, timed
  local name=$1; shift
  local t0=$SECONDS pin=()
  [[ $name == *pin1 || $name == longpin ]] && pin=(--pin-cpus "${PIN1:-4}")
  [[ $name == *pin2 ]] && pin=(--pin-cpus "${PIN2:-4,5}")
  $py -m mrbench "$@" --device cuda "${pin[@]}" --out "$out/runs/$name" \
      > "$out/$name.stdout" 2> "$out/$name.stderr"
  echo "$name: exit $? in $((SECONDS - t0)) s (mrbench $*)" | tee -a "$out/timings.txt"
  tail -25 "$out/$name.stdout"
}
[[ $steps == *,aa16,* ]] && step aa16 calibrate "$(suite aa16 16 256)" --baseline v2 \
    --candidate v2 -n "$n"
[[ $steps == *,wide,* ]] && step wide calibrate "$(suite wide 64 1024)" --baseline v2 \
    --candidate v2 -n "${NOISE_N_WIDE:-6}"
[[ $steps == *,long,* ]] && step long calibrate "$(suite long 16 1024)" --baseline v2 \
    --candidate v2 -n "${NOISE_N_LONG:-4}"
[[ $steps == *,aa16pin1,* ]] && step aa16pin1 calibrate "$(suite aa16 16 256)" --baseline v2 \
    --candidate v2 -n "$n"
[[ $steps == *,aa16pin2,* ]] && step aa16pin2 calibrate "$(suite aa16 16 256)" --baseline v2 \
    --candidate v2 -n "$n"
[[ $steps == *,longpin,* ]] && step longpin calibrate "$(suite long 16 1024)" --baseline v2 \
    --candidate v2 -n "${NOISE_N_LONG:-4}"
if [[ $steps == *,bursts,* ]]; then
  taskset -c "${PROBE_CPU:-0}" $py research/cpu_probe.py "${PIN1:-4}" "$out/probe.jsonl" &
  probe=$!
  (sleep 60; ps -eLo pid,tid,psr,cls,rtprio,ni,pcpu,stat,comm > "$out/threads.txt"
   for t in /proc/[0-9]*/task/[0-9]*; do
     printf '%s %s %s\n' "${t#/proc/}" "$(taskset -pc "${t##*/}" 2>/dev/null | cut -d: -f2)" \
         "$(cat "$t/comm" 2>/dev/null)"; done > "$out/affinity.txt") &
  cat /proc/interrupts > "$out/interrupts0.txt"
  step burstspin1 calibrate gpu-quick:gsm8k --baseline v2 --candidate v2 -n "${NOISE_N_BURSTS:-3}"
  cat /proc/interrupts > "$out/interrupts1.txt"
  kill "$probe"
fi
[[ $steps == *,vllm,* ]] && step vllm-slow100 run gpu-quick:gsm8k --target vllm --baseline v2 \
    --candidate v2 --fault slow-step:100
echo "done" >> "$out/timings.txt"
