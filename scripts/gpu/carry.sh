#!/usr/bin/env bash
# The folders a GPU study copies beside the tree to a GPU machine that gets only a copy of
# the checkout, made in a fresh checkout. Each is ignored through .git/info/exclude; a
# transfer holds at most 64 MiB, the tracked tree (~16 MB) included, so the vLLM kit goes
# in two transfers:
#   .kit0/     part_00 of the kit, with install-kit.sh, env.sh, SHA256SUMS: sent alone,
#              first (`bash .kit0/install-kit.sh .kit0` exits 10, waiting for part_01)
#   .kit1/     part_01 and the same three files: sent next, with .gpudata
#   .gpudata/  what the GPU suites read through MRBENCH_DATA_DIR: GSM8K's test split (gpu-ab
#              asks 1152 problems, the package ships 256) and the Mooncake and Azure traces,
#              with their licences; not GSM8K's train split (4 MB no suite reads, which would
#              put .kit1's transfer over the limit)
#   .nixlkit/  nixl-site.tar.xz (scripts/gpu/nixl_site.sh) for `--kv-connector nixl`,
#              sent in a transfer of its own
# Usage: scripts/gpu/carry.sh [PARTS_DIR]   (default /tmp/vllm-kit-parts: where
#   build-kit.sh writes the kit's parts when PARTS_DIR holds none and .kit0/.kit1 are not
#   both made, 3-5 min on 2 cores)
# Env: VLLM_GPU_KIT (default ../shared/vllm-gpu beside the checkout), MRBENCH_DATA_DIR
#   (default ../shared/data), NIXL=0 to skip .nixlkit (it downloads two wheels).
# Folders already made are kept; delete one to make it again.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
kit=$(realpath -m "${VLLM_GPU_KIT:-$root/../shared/vllm-gpu}")
data=$(realpath -m "${MRBENCH_DATA_DIR:-$root/../shared/data}")
parts=$(realpath -m "${1:-/tmp/vllm-kit-parts}")
for f in build-kit.sh install-kit.sh env.sh; do
  [[ -f $kit/$f ]] || { echo "carry.sh: $kit/$f is missing (set VLLM_GPU_KIT)"; exit 2; }
done
[[ -f $data/gsm8k/test.jsonl ]] || {
  echo "carry.sh: $data/gsm8k/test.jsonl is missing (set MRBENCH_DATA_DIR)"; exit 2; }
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
for d in .kit0/ .kit1/ .gpudata/ .nixlkit/; do
  grep -qxF "$d" "$exclude" 2>/dev/null || echo "$d" >> "$exclude"
done
if [[ ! -f $parts/SHA256SUMS && ! ( -f .kit0/part_00 && -f .kit1/part_01 ) ]]; then
  echo "carry.sh: building the kit into $parts (3-5 min; its log: $parts.log)"
  bash "$kit/build-kit.sh" "$parts" > "$parts.log" 2>&1 || {
    echo "carry.sh: build-kit.sh failed; its log: $parts.log"; exit 1; }
fi
for i in 0 1; do
  dest=.kit$i
  [[ -f $dest/part_0$i ]] && continue
  rm -rf "$dest.tmp"; mkdir "$dest.tmp"     # a copy cut short is made again, never used
  cp "$parts/part_0$i" "$parts/SHA256SUMS" "$kit/install-kit.sh" "$kit/env.sh" "$dest.tmp/"
  mv "$dest.tmp" "$dest"
done
if [[ ! -d .gpudata ]]; then
  rm -rf .gpudata.tmp; mkdir -p .gpudata.tmp/gsm8k
  cp "$data"/gsm8k/test.jsonl "$data"/gsm8k/LICENSE* .gpudata.tmp/gsm8k/
  [[ -d $data/traces ]] && cp -r "$data/traces" .gpudata.tmp/
  mv .gpudata.tmp .gpudata
fi
if [[ ${NIXL:-1} != 0 && ! -f .nixlkit/nixl-site.tar.xz ]]; then
  bash scripts/gpu/nixl_site.sh .nixlkit > /dev/null
fi
du -sh --apparent-size .kit0 .kit1 .gpudata .nixlkit 2>/dev/null || true
tree=$(git ls-files -z | du -cb --apparent-size --files0-from=- | tail -1 | cut -f1)
kit1=$(du -sb --apparent-size .kit1 .gpudata | awk '{s += $1} END {print s}')
echo "carry.sh: the tree and .kit1 + .gpudata come to $(( (tree + kit1) >> 20 )) MiB of the 64 a transfer holds"
