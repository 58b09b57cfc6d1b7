#!/usr/bin/env bash
# FlashInfer for the GPU kit (vLLM 0.26.0 pins flashinfer-python 0.6.14; the kit carries
# none, so `attention_backend: FLASHINFER` is "unsupported here" without it).
# Run where pip works. Usage: scripts/gpu/flashinfer_wheels.sh OUT_DIR   (writes OUT_DIR/*.whl)
#
# flashinfer-python is a pure-Python wheel (14.5 MB) that builds its CUDA kernels with nvcc
# at first use (the GPU image has nvcc 13.0) into ~/.cache/flashinfer. Of its needs the
# image has torch, numpy, ninja, einops, click, tabulate, tqdm, requests, packaging and
# nvidia-ml-py, the kit apache-tvm-ffi 0.1.10; cuda-tile comes along here. Left out on
# purpose: nvidia-cutlass-dsl and nvidia-cudnn-frontend (the CuTe DSL and cuDNN paths, not
# the attention kernels vLLM's FlashInfer backend builds); `import flashinfer` works without
# them (H200, 2026-11-28). 15 MB in all: carry OUT_DIR in a call of its own, not beside a
# kit part (each part is ~41 MB of the 64 MiB a call carries).
#
# On the GPU machine, after the kit:
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/fi-site DIR/*.whl
#   export PYTHONPATH=$PYTHONPATH:/tmp/fi-site
# The first engine start with FlashInfer compiles its kernels: on an H200 (16 CPUs, llama-1b
# preset, V2 and V1 starting together) neither engine was ready after 150 s.
set -euo pipefail
out=${1:?usage: flashinfer_wheels.sh OUT_DIR}
mkdir -p "$out"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$out" flashinfer-python==0.6.14 cuda-tile==1.7.0
ls -l "$out"
