#!/usr/bin/env bash
# tracepool's main job, from a fresh clone: installs what is needed, installs the Python package into
# .venv, and runs a small leaky training loop (examples/leaky_training.py) through
# `python -m tracepool run`, which says at the end which lines hold memory, which grew every epoch,
# and how much is only cache. With PyTorch (in .venv or the system's Python) and a GPU it uses CUDA
# tensors; otherwise stand-ins holding tracepool memory on its host backend (an emulated device).
#   examples/run_demo.sh                   # the text report, on stderr
#   examples/run_demo.sh -o report.json    # options of `python -m tracepool run`: here, a JSON report
#   examples/run_demo.sh c                 # the same program written in C (examples/leaky_training.c)
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/deps >&2
export CUDAToolkit_ROOT="${CUDAToolkit_ROOT:-/usr/local/cuda}"

# The builds show their progress, not their output (examples/show_progress.sh); a build that fails shows
# the end of its log.
if [ "${1:-}" = c ]; then
  echo "tracepool: building the C demo in build/ (a minute or two the first time, seconds after)" >&2
  bash examples/show_progress.sh build/demo-build.log bash -c 'cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
    cmake --build build -j"$(nproc)" --target tracepool_leaky_training'
  export TRACEPOOL_REPORT="${TRACEPOOL_REPORT:-stderr}"
  exec ./build/examples/tracepool_leaky_training 2>&1
fi

# The venv of tests/python/run.sh: it sees the system's packages (PyTorch, where installed there).
if [ ! -x .venv/bin/python ]; then
  python3 -m venv --system-site-packages .venv >&2
  echo '*' >.venv/.gitignore
fi
echo "tracepool: installing into .venv (a minute or two the first time, seconds after; log: build/demo-install.log)" >&2
.venv/bin/python -m pip install -q --disable-pip-version-check "scikit-build-core>=0.10" "pybind11>=2.12" >&2
bash examples/show_progress.sh build/demo-install.log \
  .venv/bin/python -m pip install -v --disable-pip-version-check --no-build-isolation --no-deps .
exec .venv/bin/python -m tracepool run "$@" examples/leaky_training.py 2>&1
