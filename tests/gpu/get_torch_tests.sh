#!/usr/bin/env bash
# tests/gpu/get_torch_tests.sh [DEST]: puts into DEST (default tests/gpu/torch_tests, git-ignored) what
# tests/gpu/torch_own_tests.py needs to run PyTorch's own tests and the GPU machine lacks: PyTorch's
# test/test_cuda.py and test/test_cuda_multigpu.py (not in the torch wheel; they import no sibling module
# of test/), and the expecttest and psutil wheels from PyPI (torch.testing._internal.common_utils imports
# expecttest, test_cuda.py imports psutil), unpacked so that DEST on PYTHONPATH makes them importable.
# Run it on a machine with network, then carry DEST to the GPU machine; nothing here is committed (another
# project's code is fetched, never vendored).
#
# Every file is pinned by sha256, and a file already in DEST with the right hash is not fetched again.
# The test files are pinned to the commits they were taken from, the closest to v2.11.0 found (see PINS
# below): TORCH_TESTS_REF=v2.11.0 fetches the tag's instead, checks nothing and prints the hashes to pin.
# TORCH_TESTS_MIRROR replaces https://raw.githubusercontent.com (same layout; file:// works). Exit
# status 1 when a download fails or a hash differs.
set -euo pipefail
DEST=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/torch_tests}
RAW=${TORCH_TESTS_MIRROR:-https://raw.githubusercontent.com}  # a mirror with the same layout may stand in
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)

# PINS: file | repository and commit | sha256. The torch 2.11.0 wheel was built from pytorch's
# 70d99e998b4955e0049d13a98d77ae1b14db1f45 (torch/version.py); no copy of test/ at that commit could be
# had. test_cuda.py comes from a fork's snapshot of main during the 2.11 cycle: it calls
# torch._C._host_emptyCache (new in 2.11) and not Stream.is_capturing or torch.accelerator.Graph (2.12),
# defines TEST_CUDAMALLOCASYNC itself as 2.11's common_utils requires, and collects under torch 2.11.0.
# test_cuda_multigpu.py imports only names 2.11's common_utils has (later versions import skipIfSandcastle).
PINS=(
  "test_cuda.py|ataerabbi-meta/pytorch/ac90d12b0bd4dab5d09b8cdc2ca6d56c11b9befb|8fba80ba0909ebf073217cd7326d4f00cdec0dfa3f41682a4ec289255cec3499"
  "test_cuda_multigpu.py|pytorch/pytorch/fc9325ea0d1cae1bbff1b67e6962e66fe562b39a|7b9e60c512bdead1b5482ce83fd5589c3708a5b01ca3779d592a5e3574b1e65b"
)
# WHEELS: requirement | wheel file | sha256 (psutil's is the abi3 manylinux x86_64 wheel; pip download
# is told the GPU machine's platform and Python, not this machine's).
WHEELS=(
  "expecttest==0.3.0|expecttest-0.3.0-py3-none-any.whl|60f88103086e1754240b42175f622be83b6ffeac419434691ee5a5be819d0544"
  "psutil==7.2.2|psutil-7.2.2-cp36-abi3-manylinux2010_x86_64.manylinux_2_12_x86_64.manylinux_2_28_x86_64.whl|076a2d2f923fd4821644f5ba89f059523da90dc9014e85f8e45a5774ca5bc6f9"
)
PY=${PYTHON:-python3}
WORK=$(mktemp -d) && trap 'rm -rf "$WORK"' EXIT
failed=0

sha() { sha256sum "$1" | cut -d' ' -f1; }

# check FILE WANT: 0 when FILE exists and hashes to WANT.
check() { [[ -f $1 ]] && [[ $(sha "$1") == "$2" ]]; }

for pin in "${PINS[@]}"; do
  IFS='|' read -r name source want <<<"$pin"
  if [[ -n ${TORCH_TESTS_REF:-} ]]; then
    curl -fsSL --retry 3 --connect-timeout 20 --max-time 120 "$RAW/pytorch/pytorch/$TORCH_TESTS_REF/test/$name" -o "$DEST/$name" || { echo "FAIL $name: download from $TORCH_TESTS_REF"; failed=1; continue; }
    echo "UNPINNED $name from pytorch/pytorch@$TORCH_TESTS_REF: sha256 $(sha "$DEST/$name")"
    continue
  fi
  if check "$DEST/$name" "$want"; then echo "ok $name (already there)"; continue; fi
  curl -fsSL --retry 3 --connect-timeout 20 --max-time 120 "$RAW/${source%%/*}/$(cut -d/ -f2 <<<"$source")/${source##*/}/test/$name" -o "$WORK/$name" ||
    { echo "FAIL $name: download from $source failed"; failed=1; continue; }
  if check "$WORK/$name" "$want"; then mv "$WORK/$name" "$DEST/$name"; echo "ok $name ($source)"
  else echo "FAIL $name: sha256 $(sha "$WORK/$name"), pinned $want"; failed=1; fi
done

for wheel in "${WHEELS[@]}"; do
  IFS='|' read -r req file want <<<"$wheel"
  if check "$DEST/wheels/$file" "$want"; then
    echo "ok $file (already there)"
  else
    mkdir -p "$DEST/wheels"
    "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
      --platform manylinux2014_x86_64 --python-version 3.12 -d "$WORK" "$req" ||
      { echo "FAIL $req: pip download failed"; failed=1; continue; }
    if check "$WORK/$file" "$want"; then mv "$WORK/$file" "$DEST/wheels/$file"; echo "ok $file (PyPI)"
    else echo "FAIL $req: no $file with sha256 $want among: $(cd "$WORK" && ls ./*.whl 2>/dev/null)"; failed=1; continue; fi
  fi
  # A wheel is a zip whose top level is importable as it stands.
  "$PY" -m zipfile -e "$DEST/wheels/$file" "$DEST" || { echo "FAIL $file: unpacking"; failed=1; }
done

if ((failed)); then echo "get_torch_tests.sh: some files are missing or wrong; see FAIL lines" >&2; exit 1; fi
echo "get_torch_tests.sh: $DEST ready ($(du -sh "$DEST" | cut -f1)); carry it to the GPU machine"
