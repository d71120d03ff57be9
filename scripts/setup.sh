#!/usr/bin/env bash
# Set Unveil up in the current Python (3.11+): the pinned torch, llama-cpp-python built for CPUs that report
# Intel AMX but cannot use it (the native build crashes on the first token there), then Unveil itself with its
# test extras. Safe to rerun: installed packages are kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -m pip install --quiet "torch==2.14.1" "torchvision==0.29.1"
if ! "$PY" -c "import llama_cpp" 2>/dev/null; then
  echo "building llama-cpp-python (a few minutes, once)..." >&2
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \
    "$PY" -m pip install --quiet --no-cache-dir "llama-cpp-python>=0.3.7"
fi
"$PY" -m pip install --quiet -e ".[dev]"
