#!/usr/bin/env bash
# The nightly job, one script for both CI jobs:
#   ci/nightly.sh cpu   bundled target on CPU: the fault catch matrix on `quick` (its clean
#                       row is the quick run, candidate V2 vs baseline V1)
#   ci/nightly.sh gpu   vLLM target on CUDA: `nightly` suite, V2 vs V1 runner, model from
#                       $MRBENCH_MODEL (a workflow variable)
# Every run is added to the history ($MRBENCH_HISTORY, default results/history.sqlite) and a
# trend report is rendered. The verdict table goes to $GITHUB_STEP_SUMMARY when set.
# Exit: 0 pass; 1 regression (or a missed fault / false alarm); 2 bad input; 3 a run failed.
set -uo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"
MRBENCH="${MRBENCH:-.venv/bin/mrbench}"
stamp="$(date -u +%Y%m%d-%H%M%S)"
out="${MRBENCH_OUT:-results/nightly-$stamp-$mode}"
db="${MRBENCH_HISTORY:-results/history.sqlite}"
summary="${GITHUB_STEP_SUMMARY:-/dev/null}"
mkdir -p "$(dirname "$out")" "$(dirname "$db")"

case "$mode" in
  cpu)
    "$MRBENCH" faults quick --out "$out" --json > "$out.faults.json"
    rc=$?
    [ -d "$out" ] || { echo "nightly: faults run wrote nothing (exit $rc)" >&2; exit "$rc"; }
    run_dir="$out/clean"
    "$MRBENCH" report --markdown "$out" >> "$summary"
    ;;
  gpu)
    : "${MRBENCH_MODEL:?set MRBENCH_MODEL to the model the GPU job benchmarks}"
    "$MRBENCH" run nightly --target vllm --device cuda --model "$MRBENCH_MODEL" \
        --candidate v2 --baseline v1 --out "$out"
    rc=$?
    [ -d "$out" ] || { echo "nightly: run wrote nothing (exit $rc)" >&2; exit "$rc"; }
    run_dir="$out"
    ;;
  *)
    echo "usage: ci/nightly.sh cpu|gpu" >&2
    exit 2
    ;;
esac

"$MRBENCH" report --markdown "$run_dir" >> "$summary"
"$MRBENCH" history add "$run_dir" --db "$db"
"$MRBENCH" history report --db "$db" --out "$out/history.html"
echo "nightly: $mode exit $rc; results $out; history $db"
exit "$rc"
