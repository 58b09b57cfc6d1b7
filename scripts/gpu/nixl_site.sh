#!/usr/bin/env bash
# NIXL for the GPU kit (`--kv-connector nixl`; the kit carries no NIXL): the cp312 wheels of
# nixl-cu13 1.5.1 and the `nixl` shim, unpacked into one site folder and packed as one
# xz tarball small enough to carry in a call of its own.
# Run where pip works. Usage: scripts/gpu/nixl_site.sh OUT_DIR   (writes OUT_DIR/nixl-site.tar.xz)
#
# The nixl-cu13 wheel is 59 MB (237 MB unpacked). Left out on purpose: `nixl_ep_cu13` (the
# expert-parallel all-to-all kernels, one 31 MB library per torch release; vLLM's
# NixlConnector never imports them), UCX's perftest library and NIXL's telemetry reader.
# What is left (the agent, UCX with its CUDA transports, the plugins) packs to about 18 MB.
# Both wheels' dist-info stay, so `importlib.metadata` finds them.
#
# On the GPU machine, after the kit:
#   mkdir -p /tmp/nixl-site && tar -xJf DIR/nixl-site.tar.xz -C /tmp/nixl-site
#   export PYTHONPATH=/tmp/nixl-site:$PYTHONPATH
set -euo pipefail
out=$(realpath -m "${1:?usage: nixl_site.sh OUT_DIR}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out" "$work/site"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 -d "$work" \
    nixl-cu13==1.5.1 nixl==1.5.1
for w in "$work"/*.whl; do (cd "$work/site" && python3 -m zipfile -e "$w" .); done
rm -rf "$work/site/nixl_ep_cu13" "$work/site/nixl_cu13.scripts" \
       "$work"/site/nixl_cu13.libs/ucx/libucx_perftest*
tar -cJf "$out/nixl-site.tar.xz" -C "$work/site" .
ls -l "$out/nixl-site.tar.xz"
