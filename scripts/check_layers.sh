#!/usr/bin/env bash
# Install mrbench the way a user gets it (a real, non-editable install into a scratch
# directory), then check what it puts in site-packages and its import layers.
#
# Why a scratch install: in the source tree the sub-packages are top-level folders that
# setuptools' package-dir maps under `mrbench`, so only an installed copy has the layout
# import-linter must walk; and only an installed copy shows what lands in site-packages.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(command -v "${PYTHON:-$PWD/.venv/bin/python}")
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# from a copy of the tracked and new files (a build never writes into the checkout)
mkdir "$tmp/src"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$tmp/src"
"$py" -m pip install -q --no-deps --no-build-isolation --target "$tmp/site" "$tmp/src" >"$tmp/pip.log" 2>&1 \
  || { cat "$tmp/pip.log" >&2; echo "check_layers: pip install failed" >&2; exit 1; }
top=$(cd "$tmp/site" && ls | grep -v '\.dist-info$' | grep -v '^bin$' | sort | tr '\n' ' ')
if [ "$top" != "mrbench " ]; then
  echo "check_layers: site-packages holds more than mrbench: $top" >&2
  exit 1
fi
cp .importlinter "$tmp/"
# the research probes are no part of the install: a copy beside it, for their contracts
mkdir "$tmp/research-root" && cp -r research "$tmp/research-root/"
# from the scratch directory, so the checkout's own folders are not importable
(cd "$tmp" && PYTHONPATH="$tmp/site" "$py" -c "import mrbench, mrbench.harness.cli, mrbench.workloads, mrbench.runner_impl" \
  && PYTHONPATH="$tmp/site:$tmp/research-root" "$(dirname "$py")/lint-imports" --config .importlinter)
