#!/usr/bin/env bash
# tracepool's main job, from a fresh clone: installs what is needed, builds, and runs a small leaky
# training loop (examples/leaky_training.c) whose memory tracepool attributes to lines of code at
# exit. On the GPU where there is one, on the host backend (an emulated device) otherwise.
#   TRACEPOOL_REPORT=report.json examples/run_demo.sh   # the JSON report instead of the text one
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/deps >&2
export CUDAToolkit_ROOT="${CUDAToolkit_ROOT:-/usr/local/cuda}"
{
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
  cmake --build build -j"$(nproc)" --target tracepool_leaky_training
} >&2
export TRACEPOOL_REPORT="${TRACEPOOL_REPORT:-stderr}"
exec ./build/examples/tracepool_leaky_training 2>&1
