#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs dependencies, builds, runs ctest, then (in the
# plain build) installs the Python package into .venv and runs its pytest suite (tests/python).
#   tests/run_tests.sh            # RelWithDebInfo build in build/
#   tests/run_tests.sh address    # ASan+UBSan build in build-address/
#   tests/run_tests.sh thread     # TSan build in build-thread/
set -euo pipefail
cd "$(dirname "$0")/.."
sanitize="${1:-}"
build="build${sanitize:+-$sanitize}"

bash .ci/deps
export CUDAToolkit_ROOT="${CUDAToolkit_ROOT:-/usr/local/cuda}"
cmake -S . -B "$build" -G Ninja -DTRACEPOOL_BUILD_TESTS=ON -DTRACEPOOL_SANITIZE="$sanitize" \
  -DCMAKE_BUILD_TYPE="$([ -n "$sanitize" ] && echo Debug || echo RelWithDebInfo)"
cmake --build "$build" -j"$(nproc)"
# validate:on checks every invariant after each operation in every test, whatever the build type.
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" --timeout 600
# The Python package is built by pip (scikit-build-core) in its own build tree; sanitizer builds of
# the core do not apply to it.
if [ -z "$sanitize" ]; then bash tests/python/run.sh; fi
