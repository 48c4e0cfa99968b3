#!/usr/bin/env bash
# tracepool from source on a machine without the CUDA Toolkit, as on a CPU laptop: in a mount namespace
# where /usr/local/cuda (and any cuda.h elsewhere) is gone,
#   1. `pip install .` into a new venv (build isolation on, as a user types it), then the demo through
#      `python -m tracepool run` on the host backend, whose report must name the leaking line;
#   2. the binary wheel (.ci/build_wheel.sh), which tests/wheel/run.sh then installs and tests where
#      there is no compiler either.
# Needs root or sudo (unshare, mount). About 6 minutes on 2 cores.
#   tests/no_cuda/run.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

if [ "${1:-}" = "--inside" ]; then
  # ---- In the namespace: no CUDA Toolkit ----
  for cuda in /usr/local/cuda /usr/local/cuda-* /opt/cuda; do
    [ -d "$cuda" ] && mount -t tmpfs none "$(readlink -f "$cuda")"
  done
  for header in /usr/include/cuda.h /usr/local/include/cuda.h; do
    [ -e "$header" ] && mount --bind /dev/null "$header"
  done
  while nvcc="$(command -v nvcc)"; do  # a wrapper elsewhere on the PATH (/usr/local/bin) goes too
    mount --bind /bin/false "$(readlink -f "$nvcc")"
    hash -r
    nvcc --version >/dev/null 2>&1 || break
  done
  if nvcc --version >/dev/null 2>&1 || [ -s /usr/local/cuda/include/cuda.h ] || [ -s /usr/include/cuda.h ]; then
    echo "tests/no_cuda/run.sh: the CUDA Toolkit is still there" >&2
    exit 1
  fi
  echo "no CUDA Toolkit: /usr/local/cuda is empty, no cuda.h, nvcc is /bin/false"
  unset CUDAToolkit_ROOT CUDA_PATH CUDA_HOME

  echo "== pip install . =="
  work="$(mktemp -d)"
  python3 -m venv "$work/venv"
  py="$work/venv/bin/python"
  # A copy of the source without the checkout's build trees, so that nothing built with the toolkit is reused.
  mkdir -p "$work/src"
  tar -C "$root" --exclude-vcs --exclude='./build*' --exclude=./.venv --exclude=./.whl -cf - . | tar -C "$work/src" -xf -
  start=$SECONDS
  "$py" -m pip install -q --disable-pip-version-check "$work/src"
  echo "installed in $((SECONDS - start)) s"
  echo "== the demo =="
  cd "$work"
  TRACEPOOL_CONF=backend:host "$py" -m tracepool run "$root/examples/leaky_training.py" 2>"$work/demo.txt" ||
    { cat "$work/demo.txt"; exit 1; }
  head -12 "$work/demo.txt"
  grep -q "GROWING across marks" "$work/demo.txt" && grep -q "leaky_training.py:101" "$work/demo.txt" ||
    { echo "tests/no_cuda/run.sh: the demo's report is not what it should be" >&2; cat "$work/demo.txt" >&2; exit 1; }

  echo "== the binary wheel, built without the CUDA Toolkit =="
  cd "$root"
  wheel="$(bash .ci/build_wheel.sh "$work/dist" | tail -1)"
  cp "$wheel" "$root/build/no-cuda-wheel/"
  exit 0
fi

mkdir -p build/no-cuda-wheel
rm -f build/no-cuda-wheel/*.whl
if [ "$(id -u)" -ne 0 ]; then
  sudo unshare --mount --propagation private bash "$0" --inside
else
  unshare --mount --propagation private bash "$0" --inside
fi
# Installed and tested where there is no compiler and no CUDA headers either (its own namespace).
bash tests/wheel/run.sh build/no-cuda-wheel/tracepool-*.whl
