#!/usr/bin/env bash
# Pack what a GPU study has finished so far, for a poll to bring back through $OUT:
# every finished run's summary, manifest and tables (per-step syncs and phases, per-wave
# latencies), also inside a campaign's hidden .NAME.* directory; not the HTML reports, the
# tokens or the engine logs. A machine goes back after 30 min held, and a campaign writes
# its own JSON only at the end: poll with this, then read the pieces back here with
# scripts/calibration_from_runs.py (or load a run's tables).
# Usage: scripts/gpu/pack_runs.sh SRC_DIR DEST.tgz
set -euo pipefail
src=${1:?usage: pack_runs.sh SRC_DIR DEST.tgz}
dest=$(realpath -m "${2:?usage: pack_runs.sh SRC_DIR DEST.tgz}")
cd "$src"
find . -path '*/run-*' \( -name summary.json -o -name manifest.json -o -name '*.csv' \) \
    | tar czf "$dest" -T -
echo "$(find . -path '*/run-*' -name summary.json | wc -l) finished runs -> $dest ($(du -h "$dest" | cut -f1))"
