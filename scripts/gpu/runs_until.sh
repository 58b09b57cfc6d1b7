#!/usr/bin/env bash
# A power or false-alarm study in pieces that fit a time-limited GPU job: single runs of
# one suite entry, the settings taking turns (clean, then each slow-step PCT, again ...),
# started only while the next one still fits the call's time, each run packed into OUT_DIR as soon as it ends.
#
# Why not `mrbench power`: where each command is limited to 10 minutes and a machine to
# 30, a campaign killed mid-run loses that run and writes no power.json. Here every
# call ends between runs, and the pieces of several calls and machines are read back
# together with `mrbench power ENTRY --from-runs DIR...` (the command's own aggregate_power).
#
# Usage: scripts/gpu/runs_until.sh OUT_DIR TAG SECONDS [SETTINGS]
#   TAG       prefix of the run directories (unique per call: m1c2 = machine 1, call 2)
#   SECONDS   the call's budget: after the first run, none starts unless the last run's
#             time (x 1.1) still fits
#   SETTINGS  comma list, `clean`, a slow-step PCT (default clean,7.6) or, with SITE set,
#             `build:NAME` (the candidate is a build with vllm fault NAME written back,
#             made by scripts/gpu/make_build.py into BUILDS_DIR/b-NAME), each optionally
#             with one of
#             `@baseline`: that run builds the baseline's engine first (--build-first
#               baseline; the run is named ...-clean-bfirst): e.g. clean,clean@baseline is
#               an A/A study of build order;
#             `@cold`: that run gets an empty Triton cache of its own (TRITON_CACHE_DIR), so
#               its first engine compiles as on a fresh machine, and the harness rebuilds it
#               (the CUDA default; ...-clean-cold);
#             `@cold-keep`: the same with --cold-engines keep, so the engine that compiled
#               is measured (...-clean-coldkeep): clean@cold-keep,clean@cold shows the
#               cold-compile bias and its fix (research/host_gap_from_runs.py reads them)
# Env: ENTRY (default gpu-quick:gsm8k), DEVICE (cuda), PIN_CPUS (4), CANARY_CPU (5),
#   SITE (a vLLM site folder, e.g. the kit's /tmp/vllm-kit/site: every run is two builds of
#   the vllm target's V2, the candidate a linked copy of SITE made by make_build.py,
#   b-same for clean and slow-step runs, b-NAME for build:NAME, the baseline
#   SITE itself; the model is the target's GPU default unless RUN_ARGS names one;
#   BUILDS_DIR: where the builds go instead of /tmp),
#   RUN_ARGS (more `mrbench run` flags, split on spaces: e.g. "--limit 3072" for 192
#   waves of the gsm8k entry, to measure what more waves buy without editing the suite),
#   FIRST (index of the first setting this call takes, so that calls go on where the last
#   one stopped), RUNS_DIR (default /tmp/mrbench-runs: where a job brings back only a few
#   files from $OUT), MRBENCH_DATA_DIR (default ./.gpudata), PYTHON.
# Writes OUT_DIR/runs.tgz: summary.json, manifest.json and the step and request tables of
#   each run this call finished (TAG-*, as RUNS_DIR outlives a call on a warm machine and a
#   file back is 16 MB at most; about 1.2 MB a 96-wave run), not itl.csv (18 MB a run);
#   OUT_DIR/log.txt: a line as each run starts and one as it ends (setting, exit code,
#   seconds, latency verdicts); OUT_DIR/env.txt.
# Exit 2 for a bad setting, or when mrbench refused a run as bad input (a flag, the entry:
#   every run would be refused alike, so the call ends there and log.txt says why);
#   otherwise 0, each run's own exit code (1 = a regression) being in log.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=$(realpath -m "${1:?usage: runs_until.sh OUT_DIR TAG SECONDS [SETTINGS]}")
tag=${2:?TAG}
budget=${3:?SECONDS}
IFS=, read -ra settings <<< "${4:-clean,7.6}"
for s in "${settings[@]}"; do
  [[ $s =~ ^(clean|[0-9]+([.][0-9]+)?|build:[a-z0-9-]+)(@baseline|@cold|@cold-keep)?$ ]] || {
    echo "runs_until.sh: setting '$s' is neither 'clean', a slow-step PCT nor build:NAME" \
      "(either with @baseline, @cold or @cold-keep, or not)"; exit 2; }
  [[ $s == build:* && -z ${SITE:-} ]] && {
    echo "runs_until.sh: setting '$s' needs SITE (the baseline's vLLM site folder)"; exit 2; }
done
py=${PYTHON:-python3}
entry=${ENTRY:-gpu-quick:gsm8k}
$py -c "import pydantic" 2>/dev/null || { echo "runs_until.sh: pydantic is missing" \
    "(carry .whl; see scripts/gpu/bundled_power.sh)"; exit 2; }
runs=$(realpath -m "${RUNS_DIR:-/tmp/mrbench-runs}")
mkdir -p "$out" "$runs"
export MRBENCH_DATA_DIR=$(realpath -m "${MRBENCH_DATA_DIR:-.gpudata}")
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $py -c "import torch; print('torch', torch.__version__)"; nproc
  echo "git: MRBENCH_GIT_SHA=${MRBENCH_GIT_SHA:-unset}"; echo "RUN_ARGS: ${RUN_ARGS:-}"
} > "$out/env.txt" 2>&1
read -ra extra <<< "${RUN_ARGS:-}"
pin=()
[[ -n ${PIN_CPUS-4} ]] && pin=(--pin-cpus "${PIN_CPUS-4}")
[[ -n ${PIN_CPUS-4} && -n ${CANARY_CPU-5} ]] && pin+=(--canary-cpu "${CANARY_CPU-5}")
i=${FIRST:-0} last=-1 refused=0
while :; do
  used=$SECONDS
  if (( last >= 0 && used + last * 11 / 10 >= budget )); then
    echo "stop: ${used} s used, the next run would take ~${last} s of ${budget}" \
      | tee -a "$out/log.txt"
    break
  fi
  s=${settings[$(( i % ${#settings[@]} ))]}
  suffix=${s#*@}; [[ $s == *@* ]] || suffix=
  case $suffix in baseline) tail=-bfirst ;; cold) tail=-cold ;; cold-keep) tail=-coldkeep ;;
                  *) tail= ;; esac
  s=${s%%@*}
  name=$(printf '%s-%02d-%s%s' "$tag" "$i" "$s" "$tail")
  fault=() iso=() cold=()
  [[ $suffix == baseline ]] && iso=(--build-first baseline)
  [[ $suffix == cold-keep ]] && iso=(--cold-engines keep)
  [[ $suffix == cold* ]] && cold=(env "TRITON_CACHE_DIR=$runs/$name.triton")
  sides=(--baseline v2 --candidate v2)
  if [[ -n ${SITE:-} ]]; then            # two builds: a linked copy (with a fault) vs SITE
    b=same; [[ $s == build:* ]] && b=${s#build:}
    build="${BUILDS_DIR:-/tmp}/b-$b"
    [[ -d $build ]] || $py scripts/gpu/make_build.py "$SITE" "$build" \
        $([[ $b != same ]] && echo "--fault $b") >> "$out/log.txt" 2>&1 || {
      echo "stop: make_build.py could not make $build" | tee -a "$out/log.txt"; exit 2; }
    sides=(--target vllm --baseline "vllm@$SITE:v2" --candidate "vllm@$build:v2")
    name=${name/build:/}
  fi
  [[ $s != clean && $s != build:* ]] && fault=(--fault "slow-step:$s")
  t0=$SECONDS
  echo "$name: started at ${used} s" | tee -a "$out/log.txt"
  "${cold[@]}" $py -m mrbench run "$entry" "${sides[@]}" "${fault[@]}" "${iso[@]}" \
      --device "${DEVICE:-cuda}" "${pin[@]}" "${extra[@]}" --out "$runs/$name" \
      > "$runs/$name.stdout" 2> "$runs/$name.stderr"
  rc=$?
  last=$(( SECONDS - t0 ))
  # the latency rows of the result table: workload, metric, ..., verdict (last column)
  # and every other row that failed (token_agreement, launches_vs_baseline, ...)
  verdicts=$(awk '$2 ~ /^(p99|median)_[a-z_]+_ms$/ {printf "%s %s ", $2, $NF}
                  $2 !~ /_ms$/ && $NF ~ /^(REGRESSION|error)$/ {printf "%s/%s %s ", $1, $2, $NF}' \
             "$runs/$name.stdout")
  echo "$name: exit $rc in ${last} s; $verdicts" | tee -a "$out/log.txt"
  if (( rc == 2 )); then       # bad input (a flag in RUN_ARGS, the entry): every run would
    echo "stop: mrbench refused the run: $(head -c 300 "$runs/$name.stderr")" \
      | tee -a "$out/log.txt"  # be refused alike, so say why once and end the call
    i=$(( i + 1 )); refused=1; break
  fi
  (cd "$runs" && find . -maxdepth 2 -type f -path "./$tag-*" \
      \( -name summary.json -o -name manifest.json \
      -o -name '*.csv' ! -name itl.csv -o -name '*.stdout' -o -name '*.stderr' \) \
      | tar czf "$out/runs.tgz.part" -T - && mv "$out/runs.tgz.part" "$out/runs.tgz")
  i=$(( i + 1 ))
done
echo "next FIRST=$i" | tee -a "$out/log.txt"
exit $(( refused ? 2 : 0 ))
