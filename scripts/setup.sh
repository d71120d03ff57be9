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

# unveil ui's browser tests drive Debian's chromium (never Playwright's own download): install it when missing.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo "installing chromium for the web app's browser tests..." >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
