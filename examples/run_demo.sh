#!/usr/bin/env bash
# Installs what is needed, builds tracepool, and runs the demo: on the GPU where there is one, on the
# host backend (an emulated device) otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/deps >&2
export CUDAToolkit_ROOT="${CUDAToolkit_ROOT:-/usr/local/cuda}"
{
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
  cmake --build build -j"$(nproc)" --target tracepool_demo
} >&2
exec ./build/examples/tracepool_demo
