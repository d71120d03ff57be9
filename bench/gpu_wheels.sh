#!/usr/bin/env bash
# Wheels for the lent GPU machines (Python 3.12, x86-64, no network there): what Unveil's import chain for
# bench/gpu_suite.py needs beyond the machine image's own packages (torch, transformers, accelerate, peft, pyarrow,
# numpy... are there). Versions are the ones installed here, so the device runs what the tests ran.
#   bench/gpu_wheels.sh [DEST]      # DEST defaults to .whl in the current directory
# Ray's wheel (77 MB) is repacked without its Java jars, RLlib, Serve, Tune, Train, LLM and Data folders and the
# dashboard's web client, and its three binaries stripped to their dynamic symbols (about 35 MB), so the tree and the wheels fit the 64 MiB carry.
set -euo pipefail
dest=${1:-.whl}
mkdir -p "$dest"
names=(ray langgraph langgraph-checkpoint langgraph-checkpoint-sqlite langgraph-prebuilt langgraph-sdk langchain-core
       langchain-protocol langsmith pydantic pydantic-core annotated-types typing-inspection jsonpatch jsonpointer
       orjson ormsgpack tenacity zstandard uuid-utils requests-toolbelt jsonschema jsonschema-specifications
       referencing rpds-py aiosqlite diffusers trl datasets dill multiprocess sniffio distro websockets
       open-clip-torch ftfy wcwidth)
platforms=()
for n in 17 24 27 28 31 34 35; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
for name in "${names[@]}"; do
  version=$(python3 -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name" 2>/dev/null) || {
    echo "skip $name (not installed here)"; continue; }
  ls "$dest" | grep -qi "^$(echo "$name" | tr - _)-$version-" && continue
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$dest" "$name==$version"
done
# Repack Ray.
shopt -s nullglob
for whl in "$dest"/ray-*.whl; do
  listing=$(unzip -Z1 "$whl")
  if grep -q '^ray/jars/' <<< "$listing"; then
    whl=$(realpath "$whl")
    tmp=$(mktemp -d)
    (cd "$tmp" && unzip -q "$whl")
    rm -rf "$tmp"/ray/jars "$tmp"/ray/rllib "$tmp"/ray/serve "$tmp"/ray/tune "$tmp"/ray/train "$tmp"/ray/llm \
           "$tmp"/ray/data "$tmp"/ray/dashboard/client/build
    for bin in "$tmp"/ray/_raylet.so "$tmp"/ray/core/src/ray/raylet/raylet "$tmp"/ray/core/src/ray/gcs/gcs_server; do
      [ -f "$bin" ] && strip --strip-unneeded "$bin"  # dynamic symbols stay: a third smaller than --strip-debug
    done
    # The RECORD lists removed files; pip --no-deps installs what is there (hashes of kept files are unchanged
    # except the stripped binaries, so drop the RECORD's hash check by rewriting it).
    record=$(ls "$tmp"/ray-*.dist-info/RECORD)
    (cd "$tmp" && find . -type f ! -path "*RECORD" | sed 's|^\./||; s|$|,,|' > "$record" && echo "$(basename "$(dirname "$record")")/RECORD,," >> "$record")
    rm "$whl"
    (cd "$tmp" && zip -q -9 -r "$whl" .)  # deflate at its best: 4.5 MB less than the default level
    rm -rf "$tmp"
  fi
done
du -sh "$dest"
# A call carries the tracked tree and the wheels together, 64 MiB at most: say where this stands, since a refused
# call costs a machine start (2026-12-08: tree 10.1 MB + wheels 56.8 MB was refused; without zstandard's 5.5 MB,
# needed by langgraph's server and langsmith but not by the default suite, it ran at b5a3956).
tree=$(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
wheels=$(du -sb "$dest" | cut -f1)
limit=$((64 * 1024 * 1024))
echo "carried: tree $((tree / 1048576)) MiB + wheels $((wheels / 1048576)) MiB of the 64 MiB a call takes"
if [ $((tree + wheels)) -gt $((limit - 2 * 1048576)) ]; then
  echo "gpu_wheels: that is at or near the limit: carry a copy without the wheels a run does not need (zstandard for the default suite)" >&2
fi
