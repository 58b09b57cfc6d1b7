#!/usr/bin/env bash
# The bundled target's latency gates on a GPU machine: how long the GPU suite and the nightly
# take, and the power study that sets the GPU suite's bars (docs/detection-power.md).
# Usage: scripts/gpu/bundled_power.sh OUT_DIR [STEPS]   (STEPS: comma list; default
#   gate,power). Needs CUDA, torch and the project's dependencies (on the H100 we measure on: the kit
#   in ../shared/vllm-gpu, `source env.sh`; or, for the bundled target alone, one call that
#   carries pydantic's wheels, the only package the image lacks: pydantic, pydantic_core
#   (cp312), annotated-types, typing-inspection, typing_extensions, fetched here with
#   `pip download --no-deps --only-binary=:all: --python-version 3.12 --platform
#   manylinux2014_x86_64 -d .whl ...`, installed there with `pip install --no-index
#   --no-deps --target /tmp/site .whl/*.whl` and PYTHONPATH=/tmp/site).
#   Writes OUT_DIR/<name>.stdout/.stderr, OUT_DIR/timings.txt and OUT_DIR/runs.tgz (every run directory, refreshed after each step,
#   so a machine taken away keeps what finished; a campaign's unfinished runs are in its
#   hidden .power-* directory).
#   gate     `run gpu-quick --device cuda`: clean V2 against V1, timed (the cross-runner gap)
#   (A study larger than one 10-minute call is simpler with scripts/gpu/runs_until.sh:
#   single runs in turn, each packed as it ends, none started that would outlast the call.)
#   power    `power POWER_SUITE --device cuda --baseline v2 --candidate v2` (default
#            gpu-quick; gpu-quick:gsm8k is the entry that meets the goals), clean A/A and the
#            slow-step ruler at POWER_PCTS (default 5,7.6,20), POWER_N runs each (default 3),
#            the settings in turn; a study larger than one GPU job: run it on each machine,
#            pack with scripts/gpu/pack_runs.sh, read the pieces back together with
#            mrbench power POWER_SUITE --from-runs DIR...
#   aa       `calibrate gpu-quick:gsm8k --baseline v2 --candidate v2 -n AA_N` (default 60):
#            the false-alarm study of the entry that meets the power goals; a machine taken
#            away keeps its finished runs in the hidden .aa.* directory: pack them while it
#            runs with scripts/gpu/pack_runs.sh OUT_DIR/runs $OUT/aa.tgz, read them back here
#            with mrbench calibrate gpu-quick:gsm8k --from-runs DIR...
#   reference `run quick --device cuda --save-reference`: this build's op counts (clean V2
#            against V1 on every quick entry), copied to OUT_DIR/op-counts/
#   faults   `faults quick --device cuda`: the catch matrix against those references, timed
#   nightly  `run nightly --device cuda`, timed; NIGHTLY_TIMEOUT seconds at most (default: no
#            limit); a cut-off run keeps its progress lines (which workload, which side,
#            elapsed) in nightly.stderr
# Data: MRBENCH_DATA_DIR, default ./.gpudata (carry it: GSM8K and the Mooncake trace).
# Provenance: set MRBENCH_GIT_SHA to the sender's `git rev-parse HEAD` in the device command
#   (the lent machine's copy of the tree carried a .git of the session's first commit on
#   2026-11-25, so results recorded that sha, dirty); env.txt says which one was used.
# CPUs: every command runs with --pin-cpus PIN_CPUS (default 4; PIN_CPUS= turns it off): the
#   bundled step is host-bound on the GPU, and one fixed CPU steadies it (docs/detection-power.md);
#   and with --canary-cpu CANARY_CPU (default 5; CANARY_CPU= turns it off): the spin-loop
#   canary that marks the waves in which the virtual machine itself ran slow.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=$(realpath -m "${1:?usage: bundled_power.sh OUT_DIR [STEPS]}")
steps=",${2:-gate,power},"
py=${PYTHON:-python3}
# the image lacks pydantic, which mrbench needs for every target: the kit brings it
$py -c "import pydantic" 2>/dev/null || { echo "bundled_power.sh: pydantic is missing:" \
    "source the kit's env.sh first (../shared/vllm-gpu), also for the bundled target"; exit 2; }
mkdir -p "$out/runs"
export MRBENCH_DATA_DIR=$(realpath -m "${MRBENCH_DATA_DIR:-.gpudata}")
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $py -c "import torch; print('torch', torch.__version__)"; nproc
  echo "git: MRBENCH_GIT_SHA=${MRBENCH_GIT_SHA:-unset}," \
       "the copy's HEAD $(git rev-parse HEAD 2>/dev/null)"
} > "$out/env.txt" 2>&1
cat "$out/env.txt"

step() {                       # step NAME ARGS...: one mrbench command, timed
  local name=$1; shift
  local t0=$SECONDS limit=()
  [[ $name == nightly && -n ${NIGHTLY_TIMEOUT:-} ]] && limit=(timeout -s INT "$NIGHTLY_TIMEOUT")
  local pin=()
  [[ -n ${PIN_CPUS-4} ]] && pin=(--pin-cpus "${PIN_CPUS-4}")
  [[ -n ${PIN_CPUS-4} && -n ${CANARY_CPU-5} ]] && pin+=(--canary-cpu "${CANARY_CPU-5}")
  "${limit[@]}" $py -m mrbench "$@" --device cuda "${pin[@]}" --out "$out/runs/$name" \
      > "$out/$name.stdout" 2> "$out/$name.stderr"
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - t0)) s (mrbench $*)" | tee -a "$out/timings.txt"
  tail -40 "$out/$name.stdout"
  tar czf "$out/runs.tgz" -C "$out" runs 2>/dev/null
}
[[ $steps == *,gate,* ]] && step gpu-quick-v2-v1 run gpu-quick
[[ $steps == *,power,* ]] && step power-gpu-quick power "${POWER_SUITE:-gpu-quick}" \
    --baseline v2 --candidate v2 -n "${POWER_N:-3}" --pcts "${POWER_PCTS:-5,7.6,20}"
[[ $steps == *,aa,* ]] && step aa calibrate gpu-quick:gsm8k --baseline v2 --candidate v2 \
    -n "${AA_N:-60}"
if [[ $steps == *,reference,* ]]; then
  step quick-reference run quick --save-reference
  mkdir -p "$out/op-counts" && cp results/baselines/op-counts/bundled-* "$out/op-counts/"
fi
[[ $steps == *,faults,* ]] && step faults-quick faults quick
[[ $steps == *,nightly,* ]] && step nightly run nightly
tar czf "$out/runs.tgz" -C "$out" runs 2>/dev/null
echo "done" >> "$out/timings.txt"
