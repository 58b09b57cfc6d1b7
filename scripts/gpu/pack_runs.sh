#!/usr/bin/env bash
# Pack what a GPU study has finished so far, for a poll to bring back through $OUT:
# every finished run's files, also inside a campaign's hidden .NAME.* directory (calibrate's
# run-NN, power's clean-NN and slowPCT-NN, faults' clean and fault directories); not the
# HTML reports, the tokens or the engine logs. A machine goes back after 30 min held, and a
# campaign writes its own JSON only at the end: poll with this, then read the pieces back
# here with `mrbench calibrate SUITE --from-runs DIR...` or `mrbench power SUITE --from-runs
# DIR...`.
# Usage: scripts/gpu/pack_runs.sh SRC_DIR DEST.tgz [NAME ...]
#   NAME: the files to take from each run (default: summary.json manifest.json *.csv). A
#   64-wave run's itl.csv is 12 MB (1.8 MB packed) and a file over 16 MB does not come
#   back: pack summaries alone often, the step tables (steps.csv) into a second file.
set -euo pipefail
src=${1:?usage: pack_runs.sh SRC_DIR DEST.tgz [NAME ...]}
dest=$(realpath -m "${2:?usage: pack_runs.sh SRC_DIR DEST.tgz [NAME ...]}")
shift 2
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(summary.json manifest.json '*.csv')
match=()
for n in "${names[@]}"; do match+=(${match:+-o} -name "$n"); done
cd "$src"
# a run directory is one that holds a summary.json
runs=$(find . -name summary.json -printf '%h\n' | sort -u)
[[ -n $runs ]] || { echo "no finished runs under $src"; exit 0; }
# shellcheck disable=SC2086
find $runs -maxdepth 1 -type f \( "${match[@]}" \) | tar czf "$dest" -T -
echo "$(wc -l <<< "$runs") finished runs -> $dest ($(du -h "$dest" | cut -f1))"
