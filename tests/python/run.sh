#!/usr/bin/env bash
# The Python package's tests: installs the package (pip, scikit-build-core) into .venv and runs pytest
# on tests/python. Re-runs rebuild only what changed: the build tree (build/py-<wheel tag>) is kept, and
# the build runs in the venv (--no-build-isolation), whose scikit-build-core and pybind11 stay put. The
# venv sees the system's packages, so a machine without network that has them (the GPU machine) needs
# nothing from PyPI.
#   tests/python/run.sh [pytest arguments]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
export CUDAToolkit_ROOT="${CUDAToolkit_ROOT:-/usr/local/cuda}"

if [ ! -x .venv/bin/python ]; then
  python3 -m venv --system-site-packages .venv
  echo '*' >.venv/.gitignore  # as Python 3.13's venv writes it: git never sees the venv
  # python3 may itself run in a venv (the GPU machine's does): its packages are made visible too.
  python3 - <<'PY'
import pathlib, site, sys, sysconfig
if sys.prefix != sys.base_prefix:
    inner = pathlib.Path(".venv") / pathlib.Path(sysconfig.get_path("purelib")).relative_to(sys.prefix)
    (inner / "outer_venv.pth").write_text("\n".join(site.getsitepackages()) + "\n")
PY
fi
py="$root/.venv/bin/python"
# websocket-client: the HTML report's tests drive headless Chromium over the DevTools protocol.
"$py" -m pip install -q --disable-pip-version-check "scikit-build-core>=0.10" "pybind11>=2.12" "pytest>=8,<10" \
  "websocket-client==1.8.0"
"$py" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps .
# CuPy and Numba, for tracepool.cupy's and tracepool.numba's tests (both import without a GPU). Pinned:
# the glue leans on CuPy's CFunctionAllocator and on Numba's memory-manager classes. Where they import
# already (the GPU machine has its own), nothing is fetched.
"$py" -c "import cupy, numba.cuda" 2>/dev/null ||
  "$py" -m pip install -q --disable-pip-version-check "cupy-cuda13x==14.2.0" "numba==0.68.1" "numba-cuda==0.30.4"

# From outside the source tree, so that bindings/python/tracepool cannot stand in for the installed package.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
"$py" -m pytest "$root/tests/python" -q -p no:cacheprovider "$@"
