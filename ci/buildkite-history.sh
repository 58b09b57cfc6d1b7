#!/usr/bin/env bash
# Restore the result history on a Buildkite agent before ci/nightly.sh runs: the history
# file ($MRBENCH_HISTORY, default results/history.sqlite) of the newest earlier finished
# build of this pipeline and branch that kept one, with `buildkite-agent artifact download
# --build`. ci/buildkite-nightly.yml uploads it again after the step (artifact_paths, pass
# or fail), so each night's build carries the whole history forward.
#
# Why the REST API: a Buildkite artifact belongs to one build, and the agent only searches
# the build it is told; the earlier builds are listed with BUILDKITE_API_TOKEN (an API
# access token with the read_builds scope, from the agent's environment hook or secrets).
#
# Exit 0: restored, or no earlier build kept one (the first night: the history starts
# tonight, said on stderr). Exit 2: no token, or the builds could not be listed; the night
# stops there, so that a fresh history never replaces the kept one.
set -uo pipefail
cd "$(dirname "$0")/.."
db="${MRBENCH_HISTORY:-results/history.sqlite}"
python="${MRBENCH_PYTHON:-python3}"
if [ -z "${BUILDKITE_API_TOKEN:-}" ]; then
  echo "buildkite-history: set BUILDKITE_API_TOKEN (read_builds) to find the history of" \
       "the previous build; without it every night would start a new one" >&2
  exit 2
fi
api="https://api.buildkite.com/v2/organizations/${BUILDKITE_ORGANIZATION_SLUG:?}/pipelines/${BUILDKITE_PIPELINE_SLUG:?}/builds"
if ! builds="$(curl -fsS --get -H "Authorization: Bearer $BUILDKITE_API_TOKEN" \
      --data-urlencode "branch=${BUILDKITE_BRANCH:?}" --data "state=finished" \
      --data "per_page=100" "$api")"; then
  echo "buildkite-history: could not list the builds of $BUILDKITE_PIPELINE_SLUG" >&2
  exit 2
fi
ids="$(printf '%s' "$builds" | "$python" -c '
import json, sys
print("\n".join(b["id"] for b in json.load(sys.stdin) if b["id"] != sys.argv[1]))
' "${BUILDKITE_BUILD_ID:-}")" || { echo "buildkite-history: unreadable build list" >&2; exit 2; }
mkdir -p "$(dirname "$db")"
for id in $ids; do                       # newest first: the first that kept one
  buildkite-agent artifact search "$db" --build "$id" >/dev/null 2>&1 || continue
  if buildkite-agent artifact download "$db" . --build "$id"; then
    echo "buildkite-history: restored $db from build $id"
    exit 0
  fi
  echo "buildkite-history: build $id kept $db but it did not download" >&2
  exit 2                                 # never fall back to an older, shorter history
done
echo "buildkite-history: no earlier build of $BUILDKITE_BRANCH kept $db; the history starts" \
     "with this build" >&2
exit 0
