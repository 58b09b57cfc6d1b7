#!/usr/bin/env bash
# The nightly job, one script for both CI jobs:
#   ci/nightly.sh cpu   bundled target on CPU: the fault catch matrix on `quick` (its clean
#                       row is the quick run, candidate V2 vs baseline V1)
#   ci/nightly.sh gpu   on CUDA: the bundled runner's fault catch matrix on `quick`, and,
#                       whenever vLLM is installed, the vLLM target's `nightly` suite, V2 vs
#                       V1 runner, on $MRBENCH_MODEL (a workflow variable; default: the
#                       bundled model). The job fails if either does.
#   ci/nightly.sh ab    two vLLM builds, the same runner on both sides, on CUDA: tonight's
#                       build ($MRBENCH_BUILD: a virtualenv, its Python, or a site folder)
#                       against the last build that passed (the link $MRBENCH_LAST_GOOD,
#                       default results/last-good-build), suite gpu-ab with its tight bars
#                       (README "Two vLLM builds"). A pass moves the link to tonight's
#                       build; the first night only sets it. Runner: $MRBENCH_RUNNER (v2).
# Every run is added to the history ($MRBENCH_HISTORY, default results/history.sqlite) and a
# trend report is rendered; a change point that tonight's runs start or confirm fails the
# night like a regression (`history report` exit 1, its last line names the first bad
# commit). The CI keeps the history file between nights (an artifact: ci/nightly.yml,
# ci/buildkite-history.sh). The verdict table goes to $GITHUB_STEP_SUMMARY when set.
# Exit: 0 pass; 1 regression (or a missed fault / false alarm, or a change point in the
# history); 2 bad input; 3 a run failed.
set -uo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"
MRBENCH="${MRBENCH:-.venv/bin/mrbench}"
stamp="$(date -u +%Y%m%d-%H%M%S)"
out="${MRBENCH_OUT:-results/nightly-$stamp-$mode}"
db="${MRBENCH_HISTORY:-results/history.sqlite}"
summary="${GITHUB_STEP_SUMMARY:-/dev/null}"
mkdir -p "$(dirname "$out")" "$(dirname "$db")"
added=()                # the runs tonight adds to the history: their groups gate the report
rc=0
add_to_history() {      # a history that cannot be written fails the night (exit 2)
  if "$MRBENCH" history add "$1" --db "$db"; then added+=("$1"); else
    local arc=$?; [ "$rc" -eq 0 ] && rc=$arc; fi
}

case "$mode" in
  cpu)
    # every historic fault, and the latency ruler: +50 % on each V2 step must fail quick
    "$MRBENCH" faults quick --ruler slow-step:50 --out "$out" --json > "$out.faults.json"
    rc=$?
    [ -d "$out" ] || { echo "nightly: faults run wrote nothing (exit $rc)" >&2; exit "$rc"; }
    run_dir="$out/clean"
    "$MRBENCH" report --markdown "$out" >> "$summary"
    ;;
  gpu)
    "$MRBENCH" faults quick --device cuda --out "$out/bundled" --json > "$out.bundled.faults.json"
    rc=$?
    [ -d "$out/bundled" ] || { echo "nightly: bundled GPU matrix wrote nothing (exit $rc)" >&2; exit "$rc"; }
    "$MRBENCH" report --markdown "$out/bundled" >> "$summary"
    add_to_history "$out/bundled/clean"
    run_dir=""
    if "${MRBENCH_PYTHON:-.venv/bin/python}" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"; then
      model_args=()
      [ -n "${MRBENCH_MODEL:-}" ] && model_args=(--model "$MRBENCH_MODEL")
      # V2 against V1 differ by design: each latency ratio is also judged against the
      # earlier passing nights' ratios (--history), where a V2-only slowdown shows
      "$MRBENCH" run nightly --target vllm --device cuda "${model_args[@]}" \
          --candidate v2 --baseline v1 --history "$db" --out "$out/vllm" \
          --junit-xml "$out/junit-vllm.xml"
      vrc=$?
      [ -d "$out/vllm" ] || { echo "nightly: vllm run wrote nothing (exit $vrc)" >&2; exit "$vrc"; }
      [ "$rc" -eq 0 ] && rc=$vrc
      run_dir="$out/vllm"
    else
      echo "nightly: vLLM is not installed; the vllm target (V2 vs V1) did not run" >&2
    fi
    ;;
  ab)
    build="${MRBENCH_BUILD:?ci/nightly.sh ab: set MRBENCH_BUILD to the vLLM build to judge}"
    last="${MRBENCH_LAST_GOOD:-results/last-good-build}"
    runner="${MRBENCH_RUNNER:-v2}"
    if [ ! -e "$last" ]; then
      mkdir -p "$(dirname "$last")" && ln -sfn "$(realpath "$build")" "$last"
      echo "nightly: no last good build yet: $last now names $build; nothing compared" >&2
      exit 0
    fi
    model_args=()
    [ -n "${MRBENCH_MODEL:-}" ] && model_args=(--model "$MRBENCH_MODEL")
    "$MRBENCH" run gpu-ab --target vllm --device cuda "${model_args[@]}" \
        --candidate "vllm@$build:$runner" --baseline "vllm@$(realpath "$last"):$runner" \
        --out "$out/ab" --junit-xml "$out/junit-ab.xml"
    rc=$?
    [ -d "$out/ab" ] || { echo "nightly: two-build run wrote nothing (exit $rc)" >&2; exit "$rc"; }
    [ "$rc" -eq 0 ] && ln -sfn "$(realpath "$build")" "$last"
    run_dir="$out/ab"
    ;;
  *)
    echo "usage: ci/nightly.sh cpu|gpu|ab" >&2
    exit 2
    ;;
esac

if [ -n "$run_dir" ]; then
  "$MRBENCH" report --markdown "$run_dir" >> "$summary"
  add_to_history "$run_dir"
fi
if [ "${#added[@]}" -gt 0 ]; then
  gate=()
  for r in "${added[@]}"; do gate+=(--gate-run "$r"); done
  "$MRBENCH" history report --db "$db" --out "$out/history.html" "${gate[@]}" | tee "$out.history.txt"
  hrc=${PIPESTATUS[0]}
  printf '\n%s\n' "$(tail -n 1 "$out.history.txt")" >> "$summary"
  [ "$rc" -eq 0 ] && rc=$hrc
fi
echo "nightly: $mode exit $rc; results $out; history $db"
exit "$rc"
