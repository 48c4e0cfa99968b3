#!/usr/bin/env bash
# The binary wheel as a PyTorch user installs it, on a machine with no compiler and no CUDA headers:
# builds it (.ci/build_wheel.sh: manylinux, auditwheel-repaired), then, in a mount namespace where
# every compiler and CMake is /bin/false and the CUDA headers are gone, installs it into a new venv that
# sees none of the system's packages (pip --only-binary: nothing may be built), runs the demo and the
# Python test suite against it (the browser tests included).
#   tests/wheel/run.sh [WHEEL]     # a wheel already built, else .ci/build_wheel.sh makes one
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

if [ "${1:-}" = "--inside" ]; then
  # ---- In the namespace: no compiler, no CUDA headers ----
  wheel="$2"
  for tool in gcc g++ cc c++ cpp clang clang++ clang-14 gcc-12 g++-12 x86_64-linux-gnu-gcc-12 x86_64-linux-gnu-g++-12 \
              cmake nvcc ld; do
    path="$(command -v "$tool" 2>/dev/null || true)"
    [ -n "$path" ] && mount --bind /bin/false "$(readlink -f "$path")"
  done
  # The headers go; the toolkit's runtime libraries stay (numba-cuda loads libcudart, as a PyTorch user's
  # pip-installed CUDA runtime would be there).
  for headers in /usr/local/cuda/include /usr/local/include/cuda.h /usr/include/cuda.h; do
    if [ -d "$headers" ]; then mount -t tmpfs none "$(readlink -f "$headers")"
    elif [ -e "$headers" ]; then mount --bind /dev/null "$(readlink -f "$headers")"; fi
  done
  if gcc --version >/dev/null 2>&1 || c++ --version >/dev/null 2>&1 || [ -s /usr/local/cuda/include/cuda.h ] || [ -s /usr/local/include/cuda.h ]; then
    echo "tests/wheel/run.sh: a compiler or the CUDA headers are still there" >&2
    exit 1
  fi
  echo "no compiler (gcc, g++, cc, clang, cmake are /bin/false) and no CUDA headers (/usr/local/cuda/include is empty)"
  venv="$(mktemp -d)/venv"
  python3 -m venv "$venv"
  py="$venv/bin/python"
  # Only wheels: a source build would fail here anyway, and must not be what passes.
  "$py" -m pip install -q --disable-pip-version-check --only-binary=:all: "$wheel" "pytest>=8,<10" numpy \
    "websocket-client==1.8.0" "cupy-cuda13x==14.2.0" "numba==0.68.1" "numba-cuda==0.30.4"
  "$py" -c 'import sys, tracepool; p = tracepool.library_path(); print("tracepool from", p); sys.exit(not p.startswith(sys.prefix))'
  work="$(mktemp -d)"
  cd "$work"
  echo "== the demo, from the wheel =="
  TRACEPOOL_CONF=backend:host "$py" -m tracepool run --html "$work/demo.html" "$root/examples/leaky_training.py" \
    2>"$work/demo.txt" || { cat "$work/demo.txt"; exit 1; }
  head -12 "$work/demo.txt"
  grep -q "GROWING across marks" "$work/demo.txt" && grep -q "leaky_training.py:101" "$work/demo.txt" &&
    grep -q "<!DOCTYPE html>" "$work/demo.html" || { echo "the demo's report is not what it should be" >&2; exit 1; }
  echo "== the Python tests, against the wheel =="
  TRACEPOOL_REQUIRE_BROWSER=1 TRACEPOOL_SCREENSHOTS="$work/screenshots" \
    "$py" -m pytest "$root/tests/python" -q -p no:cacheprovider
  exit 0
fi

wheel="${1:-}"
if [ -z "$wheel" ]; then
  wheel="$(bash .ci/build_wheel.sh | tail -1)"
fi
wheel="$(readlink -f "$wheel")"
echo "wheel: $wheel ($(du -k "$wheel" | cut -f1) KiB)"
if [ "$(id -u)" -ne 0 ]; then
  exec sudo unshare --mount --propagation private bash "$0" --inside "$wheel"
fi
exec unshare --mount --propagation private bash "$0" --inside "$wheel"
