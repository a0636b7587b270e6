#!/usr/bin/env bash
# The benchmark environment behind benchmarks/e2e.py (and the real-model benchmarks): layoutopt with its
# extras plus PyTorch (the CPU wheel this machine kind keeps on disk; torch exports the seed networks and
# torchvision's mobile models to ONNX and is the eager baseline), ONNX Runtime and OpenVINO (the `real-models`
# extra: the runtimes the exported builds are timed beside), in .venv-bench (never the test venv: torch
# changes TVM's import time and OpenMP behaviour). Safe to re-run.
#   bash scripts/setup-bench-venv.sh && .venv-bench/bin/python -m benchmarks.e2e --networks resnet50_v1
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv-bench/bin/python ]; then
  "$PY" -m venv .venv-bench
fi
.venv-bench/bin/python -m pip install --quiet --upgrade pip
.venv-bench/bin/python -m pip install --quiet -e '.[tvm,bench,real-models]' pillow
# torch 2.13.0's CPU wheel (on this machine kind's disk); torchvision's only release for it on PyPI is a
# CUDA build: installed without its dependencies, its models run on the CPU (benchmarks/networks.py
# stubs the CUDA-only meta registrations)
.venv-bench/bin/python -m pip install --quiet torch==2.13.0
.venv-bench/bin/python -m pip install --quiet --no-deps "torchvision==0.28.*"
.venv-bench/bin/python -c "import onnxruntime, openvino, torch, layoutopt.tvm; print('bench venv ready: torch', torch.__version__, 'onnxruntime', onnxruntime.__version__, 'openvino', openvino.__version__)"
