#!/usr/bin/env bash
# tests/gpu/run.sh OUTDIR: the whole GPU-machine check of tracepool, run from the repository root.
#
# Builds from source (with the CUDA stress suite, -DTRACEPOOL_BUILD_CUDA_TESTS=ON), installs the Python
# package (pip install --no-build-isolation . into a venv that sees the system's torch), runs the CUDA
# conformance tests, the CUDA stress suite (tests/gpu/stream_stress.cu: kernels check that no block is
# handed out while a stream may still use it), both again under compute-sanitizer memcheck (with
# --leak-check full) and the stress suite under racecheck, the host unit tests, the C++ benchmarks (the
# allocator's, and what call-site capture costs), the PyTorch checks and benchmarks
# (tests/gpu/torch_check.py, one process per allocator and round), the seed scenarios
# (tests/gpu/torch_seeds.py, one process each, all at once), the capture probe and the CUDA-graph checks
# and benchmarks (tests/gpu/capture_probe.cu, tests/gpu/graph_check.py), the C, C++ and ctypes examples
# on CUDA (tests/install/examples.cmake), the CuPy, Numba and mixed-runtime checks and benchmarks
# (tests/gpu/hosts_check.py), and prints a summary table last (also OUTDIR/summary.md). The graph and
# host checks run before the PyTorch benchmarks: a budget too short for everything skips benchmarks. Every step is bounded by `timeout` and by an overall budget
# (TRACEPOOL_GPU_BUDGET_S, default 550 s) so the run ends inside the 10 minutes a device call may take; a step that cannot run
# becomes a FAIL or SKIP row, never a silent stop. Exit status 1 if any row is FAIL; rows marked
# meets/misses are performance targets and inform only, as do info rows.
#
# TRACEPOOL_GPU_STEPS=capture runs instead only what call sites cost inside PyTorch (issue 15): the
# Python package is built, then tests/gpu/capture_bench.py runs one process per variant (PyTorch's
# allocator; tracepool with capture:off, python, native and all; the time spent inside tracepool_malloc
# and tracepool_free under tests/gpu/timed_shim.cpp), all at once, taking turns of about half a second
# for up to TRACEPOOL_CAPTURE_TURNS (default 30) rounds, over a ResNet-50 AdamW step with fresh
# batches, a GPT-2 step, ResNet-18 inference at batch 1 and a torch.empty loop; its budget defaults to
# 575 s (call it with a 600 s limit). Its output goes to torch.log, the relay's figures to bench.json.
#
# TRACEPOOL_GPU_STEPS=segments runs instead issue 18's rows: the Python package is built, then the CUDA-graph
# and CuPy/Numba checks run on growable segments (TRACEPOOL_CONF=segments:growable), then
# tests/gpu/segments_bench.py's benchmark: GPT-2, ResNet-50 and variable-length GPT-2 training under PyTorch's
# allocator, PyTorch's with expandable segments, tracepool classic and tracepool growable, taking turns
# (a capture_bench.py relay), with step times and peak reserved bytes. Budget 575 s.
#
# TRACEPOOL_GPU_STEPS=multi runs instead the rows that need two GPUs (call it on the nvidia-h100-x2 kind): the
# C++ build and the Python package, then Note [No context as a side effect] in a fresh process (the CUDA
# conformance case), tests/gpu/contexts_check.py (two ranks under torchrun, each on its own device: after a
# report, an out-of-memory error and the exit report, nvidia-smi lists each rank on its own device alone),
# tests/gpu/peer_check.py (copies between the devices, classic and growable segments) and the ranks step.
# Budget 420 s. The full run has these rows too; with one GPU the two-GPU ones skip.
#
# TRACEPOOL_GPU_STEPS=intercept runs instead the interposer's rows (issue 34, tests/gpu/intercept_check.py): the
# Python package is built, then `run --intercept` over a CUDA C++ program, CuPy, PyTorch with and without the
# plugin, and the cost of a cudaMalloc+cudaFree pair. Budget 500 s.
#
# TRACEPOOL_GPU_STEPS=torch_tests runs instead PyTorch's own allocator tests (issue 32): the Python package is
# built, then tests/gpu/torch_own_tests.py runs each selected test of test_cuda.py and test_cuda_multigpu.py in a
# process of its own, natively and under tracepool (section 2g). The test files are not in the repository:
# tests/gpu/get_torch_tests.sh fetches them into the git-ignored tests/gpu/torch_tests, which the device call
# must carry. Call it on nvidia-h100-x2 for the multi-GPU tests. Budget 575 s.
#
# OUTDIR holds at most 8 files: build.log (with pip's output) unit.log conformance.log (with the stress
# suite's and every compute-sanitizer run's output, each under a ==== header) bench.log (the trace
# bench's output at its end) bench.json torch.log pages.tar.gz (the HTML reports of the unmarked training
# runs, to open or screenshot on another machine) summary.md. The build trees are outside OUTDIR:
# $TRACEPOOL_GPU_BUILD, default /tmp/tracepool-gpu-build, and pyproject.toml's build/py-*; the venv is
# $TRACEPOOL_GPU_VENV, default /tmp/tracepool-gpu-venv.
set -u
OUT=${1:?usage: tests/gpu/run.sh OUTDIR}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 2
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd) && cd "$ROOT" || exit 2
BUILD=${TRACEPOOL_GPU_BUILD:-/tmp/tracepool-gpu-build}
LIB=$BUILD/capi/libtracepool.so
STEPS=${TRACEPOOL_GPU_STEPS:-all}
case $STEPS in
  all) budget_s=570 ;; capture | segments | torch_tests) budget_s=575 ;; growth) budget_s=400 ;; multi) budget_s=420 ;;
  intercept) budget_s=500 ;;
  *) echo "TRACEPOOL_GPU_STEPS: all, capture, growth, segments, multi, torch_tests or intercept, not $STEPS" >&2; exit 2 ;;
esac
DEADLINE=$((SECONDS + ${TRACEPOOL_GPU_BUDGET_S:-$budget_s}))
WORK=$(mktemp -d) && trap 'rm -rf "$WORK"' EXIT
rm -f "$OUT"/{build,unit,conformance,bench,trace_bench,torch}.log "$OUT"/bench.json "$OUT"/summary.md "$OUT"/pages.tar.gz
export PYTHONUNBUFFERED=1

ROWS=()
row() { ROWS+=("$1|$2|$3"); }  # row STATUS STEP DETAIL

# budget CAP [NEED]: seconds the next step may take (at most CAP), or 0 once fewer than NEED (15) are left.
budget() {
  local left=$((DEADLINE - SECONDS - 10))
  ((left > $1)) && left=$1
  ((left < ${2:-15})) && left=0
  echo "$left"
}

# gtest_counts LOG: "ran passed failed skipped" from a GoogleTest console log.
gtest_counts() {
  local ran pass fail skip
  ran=$(sed -nE 's/^\[==========\] ([0-9]+) tests? from .* ran\..*/\1/p' "$1" | tail -1)
  pass=$(sed -nE 's/^\[  PASSED  \] ([0-9]+) tests?\..*/\1/p' "$1" | tail -1)
  fail=$(sed -nE 's/^\[  FAILED  \] ([0-9]+) tests?, listed below.*/\1/p' "$1" | tail -1)
  skip=$(sed -nE 's/^\[  SKIPPED \] ([0-9]+) tests?, listed below.*/\1/p' "$1" | tail -1)
  echo "${ran:-0} ${pass:-0} ${fail:-0} ${skip:-0}"
}

# gtest_step NAME BINARY LOG NEED_RUN [ARGS...]: runs a GoogleTest binary and adds its row; with
# NEED_RUN=1 the row fails when every selected test skipped (the CUDA suite without a GPU).
gtest_step() {
  local name=$1 bin=$2 log=$3 need_run=$4 t rc ran pass fail skip
  shift 4
  t=$(budget 150)
  if [[ ! -x $bin ]]; then row FAIL "$name" "missing: $bin"; return; fi
  if ((t == 0)); then row SKIP "$name" "time budget spent"; return; fi
  timeout -k 5 "$t" "$bin" "$@" >"$log" 2>&1
  rc=$?
  read -r ran pass fail skip < <(gtest_counts "$log")
  local counts="$pass passed, $fail failed, $skip skipped of $ran"
  if ((rc == 124)); then row FAIL "$name" "timed out after ${t}s; $counts"
  elif ((rc != 0)); then row FAIL "$name" "exit $rc; $counts"
  elif ((ran == 0)); then row FAIL "$name" "no tests selected"
  elif ((need_run && pass == 0)); then row FAIL "$name" "$counts: all skipped, was a GPU seen?"
  else row PASS "$name" "$counts"; fi
}

# ---- 1. GPU ---------------------------------------------------------------------------------------
if command -v nvidia-smi >/dev/null; then
  smi=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,utilization.gpu \
    --format=csv,noheader 2>&1 | head -1)
  if [[ $smi == *MiB* ]]; then row PASS "nvidia-smi" "$smi"; else row FAIL "nvidia-smi" "${smi:-no output}"; fi
else
  row FAIL "nvidia-smi" "not found: no NVIDIA driver on this machine"
fi

# ---- 2. Build -------------------------------------------------------------------------------------
{ cmake --version | head -1; nvcc --version 2>&1 | tail -2; g++ --version | head -1; } >"$OUT/build.log" 2>&1
t0=$SECONDS
if [[ $STEPS == capture || $STEPS == segments || $STEPS == torch_tests || $STEPS == intercept ]]; then
  row SKIP "build" "TRACEPOOL_GPU_STEPS=$STEPS: the Python package alone"
elif [[ ! -f CMakeLists.txt ]]; then
  row FAIL "build" "no CMakeLists.txt in $ROOT"
elif ! command -v cmake >/dev/null; then
  row FAIL "build" "cmake not found"
else
  timeout -k 5 120 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DTRACEPOOL_BUILD_TESTS=ON -DTRACEPOOL_BUILD_BENCHMARKS=ON -DTRACEPOOL_BUILD_CUDA_TESTS=ON >>"$OUT/build.log" 2>&1
  rc=$?
  if ((rc != 0)); then
    row FAIL "build" "configure failed (exit $rc), see build.log"
  else
    # -k 0: build every target that can be built, so one broken target leaves the rest testable.
    timeout -k 5 $((300 - SECONDS + t0)) cmake --build "$BUILD" -j"$(nproc)" -- -k 0 >>"$OUT/build.log" 2>&1
    rc=$?
    errs=$(grep -c -E 'error:|FAILED:' "$OUT/build.log")
    if ((rc == 0)); then row PASS "build" "Release, $((SECONDS - t0)) s"
    elif ((rc == 124)); then row FAIL "build" "timed out after $((SECONDS - t0)) s"
    else row FAIL "build" "exit $rc, $errs error lines, see build.log"; fi
  fi
fi

# Baseline plugins for the PyTorch checks (minimal exact-size cache; tracepool timed from outside).
REF=$BUILD/reference_plugins.so
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
[[ $STEPS == capture || $STEPS == segments || $STEPS == torch_tests || $STEPS == intercept ]] ||
  g++ -O2 -std=c++17 -shared -fPIC tests/gpu/reference_plugins.cpp -o "$REF" -Icapi/include -I"$CUDA_HOME/include" \
    -L"$CUDA_HOME/lib64" -lcudart -L"$BUILD/capi" -ltracepool -Wl,-rpath,"$BUILD/capi" >>"$OUT/build.log" 2>&1 ||
  echo "reference plugins did not build: the reference row will say so" >>"$OUT/build.log"

# ---- 2b. The Python package ------------------------------------------------------------------------
# pip builds libtracepool.so, the extension and (torch being importable) libtracepool_torch.so once more, in
# scikit-build-core's own tree (pyproject.toml's build-dir, kept between runs). There is no network
# here: the venv sees the system's torch, pybind11 and scikit-build-core. It builds in the background
# while the C++ tests run and is waited for before anything is timed (wait_for_package).
VENV=${TRACEPOOL_GPU_VENV:-/tmp/tracepool-gpu-venv}
PY=python3
PIP_PID=
# make_venv: a venv that sees python3's packages. python3 may itself be a venv (this machine's is
# /opt/torch/.venv), whose packages --system-site-packages does not reach: a .pth file in the new venv
# adds python3's site folders after the venv's own.
make_venv() {
  { python3 -m venv --system-site-packages "$VENV" || python3 -m venv --system-site-packages --without-pip "$VENV"; } &&
    python3 -c 'import site; print(*site.getsitepackages(), sep="\n")' \
      >"$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/python3-site.pth"
}
t=$(budget 300 60)
if [[ ! -f pyproject.toml ]]; then
  row FAIL "pip install (Python package)" "no pyproject.toml in $ROOT"
elif ((t == 0)); then
  row SKIP "pip install (Python package)" "time budget spent"
else
  (
    start=$SECONDS
    make_venv &&
      timeout -k 5 "$t" "$VENV/bin/python" -m pip install --no-build-isolation --no-deps --no-index . &&
      "$VENV/bin/python" -c 'import tracepool, tracepool.torch as t; print("package:", tracepool.library_path(), t._torch_lib_path())'
    rc=$?
    echo "$((SECONDS - start)) $rc" >"$WORK/pip.result"
    exit "$rc"
  ) >"$WORK/pip.log" 2>&1 &
  PIP_PID=$!
fi

# wait_for_package: the pip install's row; its output goes into build.log; PY becomes the venv's python.
wait_for_package() {
  [[ -n $PIP_PID ]] || return
  wait "$PIP_PID"
  PIP_PID=
  local secs rc shim
  secs=? rc=?
  [[ -f $WORK/pip.result ]] && read -r secs rc <"$WORK/pip.result"
  { printf '\n==== pip install --no-build-isolation . (exit status %s, %s s) ====\n' "$rc" "$secs"; cat "$WORK/pip.log"; } \
    >>"$OUT/build.log"
  if [[ $rc != 0 ]]; then
    row FAIL "pip install (Python package)" "exit $rc after $secs s: $(grep -iE 'error' "$WORK/pip.log" | tail -1 | cut -c1-150)"
    return
  fi
  PY=$VENV/bin/python
  shim=$(sed -nE 's/^package: .* (\/.*libtracepool_torch\.so)$/\1/p' "$WORK/pip.log")
  row PASS "pip install (Python package)" "$secs s (in the background); torch allocator class: ${shim:-not built, see build.log}"
}

# ---- 2c. What call sites cost inside PyTorch (tests/gpu/capture_bench.py; TRACEPOOL_GPU_STEPS=capture) --
# One process per variant, all at once, taking turns (Note [Turns] in capture_bench.py): PyTorch's
# allocator, tracepool with each capture mode, and the timed shim's processes (tests/gpu/timed_shim.cpp)
# for what each mode spends inside tracepool. capture_bench.py report turns the relay's JSON into rows.
capture_relay() {
  local shim=$WORK/timed_shim.so lib t
  g++ -O2 -std=c++17 -shared -fPIC tests/gpu/timed_shim.cpp -o "$shim" -ldl >>"$OUT/build.log" 2>&1 || shim=
  lib=$("$PY" -c 'import tracepool; print(tracepool.library_path())' 2>>"$OUT/build.log")
  if [[ -z $shim || -z $lib ]]; then
    row FAIL "capture bench: timed shim" "timed_shim.so did not build (see build.log) or no library ('$lib')"
    shim=
  fi
  t=$(budget 560 60)
  printf '\n==== capture_bench.py relay (limit %s s, %s) ====\n' "$t" "$(date +%T)" >>"$OUT/torch.log"
  if ((t == 0)); then row SKIP "capture bench" "time budget spent"; return; fi
  TRACEPOOL_TIMED_SHIM=$shim TRACEPOOL_TIMED_LIB=$lib timeout -k 10 "$t" "$PY" tests/gpu/capture_bench.py relay \
    --out "$WORK/relay.json" --budget $((t - 30)) --turns "${TRACEPOOL_CAPTURE_TURNS:-30}" >>"$OUT/torch.log" 2>&1
  echo "==== exit status $?" >>"$OUT/torch.log"
  cp "$WORK/relay.json" "$OUT/bench.json" 2>/dev/null
  while IFS= read -r line; do ROWS+=("$line"); done < <(
    { python3 tests/gpu/capture_bench.py report "$WORK/relay.json" || echo "FAIL|capture bench|capture_bench.py report failed"; } 2>&1 \
      | grep -E '^[A-Za-z]+\|' || echo "FAIL|capture bench|capture_bench.py report printed nothing")
}

if [[ $STEPS == capture ]]; then
  wait_for_package
  if [[ $PY == python3 ]]; then row FAIL "capture bench" "no package to measure"; else capture_relay; fi
fi

# ---- 2d. Growth without marks and who holds it (tests/gpu/unmarked_check.py, tests/bench/holders_bench.py;
# TRACEPOOL_GPU_STEPS=growth runs this alone). Untimed but for the holder search, which times itself:
# under `all` it runs beside the seed scenarios. Rows go to WORK/growth.rows, logs to torch.log.
growth_step() {
  local t
  t=$(budget 200 60)
  if ((t == 0)); then echo "SKIP|unmarked: growth without marks|time budget spent" >"$WORK/growth.rows"; return; fi
  {
    timeout -k 5 "$t" "$PY" tests/gpu/unmarked_check.py "$WORK/unmarked" 2>>"$WORK/growth.log" ||
      echo "FAIL|unmarked: growth without marks|unmarked_check.py exit $? (see torch.log)"
    timeout -k 5 60 "$PY" tests/bench/holders_bench.py --objects 1000000 >"$WORK/holders.log" 2>&1
    local rc=$? line
    line=$(grep -E '^holders: ' "$WORK/holders.log" | tail -1)
    if ((rc != 0)) || [[ -z $line ]]; then echo "FAIL|who holds it: 1M Python objects|exit $rc: $(tail -1 "$WORK/holders.log")"
    elif [[ $line =~ median\ ([0-9.]+)\ s ]] && awk "BEGIN{exit !(${BASH_REMATCH[1]} <= 2)}"; then
      echo "meets|who holds it: 1M Python objects|${line#holders: }"
    else echo "misses|who holds it: 1M Python objects|${line#holders: }"; fi
  } >"$WORK/growth.rows"
  { cat "$WORK/holders.log"; for f in "$WORK"/unmarked/*.log; do printf '\n==== %s ====\n' "$f"; tail -5 "$f"; done
    for b in val_outputs closure graph none; do
      printf '\n==== python -m tracepool report --top 4 %s.json ====\n' "$b"
      "$PY" -m tracepool report --top 4 "$WORK/unmarked/$b.json"
    done; } >>"$WORK/growth.log" 2>&1
  tar -czf "$OUT/pages.tar.gz" -C "$WORK/unmarked" $(cd "$WORK/unmarked" && ls ./*.html 2>/dev/null) 2>>"$WORK/growth.log"
}
growth_rows() {
  { printf '\n==== growth without marks, who holds it ====\n'; cat "$WORK/growth.log"; } >>"$OUT/torch.log" 2>/dev/null
  while IFS= read -r line; do ROWS+=("$line"); done <"$WORK/growth.rows"
}

if [[ $STEPS == growth ]]; then
  wait_for_package
  if [[ $PY == python3 ]]; then row FAIL "unmarked: growth without marks" "no package"; else growth_step; growth_rows; fi
fi

# ---- 2e. Growable segments (issue 18; TRACEPOOL_GPU_STEPS=segments runs this alone) -------------------
# The CUDA-graph and CuPy/Numba checks once more with segments:growable (one process each; a row each,
# PASS when every check passed), then the relay of four allocators (segments_bench.py says what it
# measures). The relay's JSON goes to bench.json.
# check_step KIND NAME [ARGS]: one process of tests/gpu/KIND_check.py (graph, hosts) writing
# WORK/KIND.NAME.json; its output and the traces of its failed checks go to torch.log.
SKIPPED_CHECKS=""  # the check_steps the budget left no time for: "KIND.NAME ..."
check_step() {
  local kind=$1 name=$2 t rc
  shift 2
  t=$(budget 120 40)
  printf '\n==== %s_check.py %s (limit %s s, %s) ====\n' "$kind" "$*" "$t" "$(date +%T)" >>"$OUT/torch.log"
  if ((t == 0)); then echo "skipped: time budget spent" >>"$OUT/torch.log"; SKIPPED_CHECKS+=" $kind.$name"; return; fi
  timeout -k 5 "$t" "$PY" "tests/gpu/${kind}_check.py" run "$@" --out "$WORK/$kind.$name.json" >>"$OUT/torch.log" 2>&1
  rc=$?
  echo "==== exit status $rc" >>"$OUT/torch.log"
  [[ -f $WORK/$kind.$name.json ]] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); [print("%s: %s" % (k, v.get("trace", v["detail"]))) for k, v in d["checks"].items() if v["status"] != "ok"]' \
    "$WORK/$kind.$name.json" >>"$OUT/torch.log" 2>&1
}
checks_row() {  # checks_row NAME FILE: one row from a graph_check/hosts_check JSON
  python3 - "$1" "$2" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
try:
    checks = json.load(open(path))["checks"]
except (OSError, ValueError, KeyError) as e:
    print("FAIL|%s|no result (%s); see torch.log" % (name, e)); sys.exit()
bad = ["%s: %s" % (k, v["detail"][:200]) for k, v in checks.items() if v["status"] != "ok"]
print("%s|%s|%s" % ("FAIL" if bad or not checks else "PASS", name,
                    "; ".join(bad) if bad else "%d checks passed: %s" % (len(checks), ", ".join(checks))))
PY
}
segments_step() {
  local t
  TRACEPOOL_CONF=segments:growable check_step graph growable --allocator tracepool
  ROWS+=("$(checks_row "CUDA graphs on growable segments" "$WORK/graph.growable.json")")
  TRACEPOOL_CONF=segments:growable check_step hosts growable --allocator tracepool
  ROWS+=("$(checks_row "CuPy/Numba on growable segments" "$WORK/hosts.growable.json")")
  t=$(budget 560 90)
  printf '\n==== capture_bench.py relay for segments_bench.py (limit %s s, %s) ====\n' "$t" "$(date +%T)" >>"$OUT/torch.log"
  if ((t == 0)); then row SKIP "segments bench" "time budget spent"; return; fi
  timeout -k 10 "$t" "$PY" tests/gpu/capture_bench.py relay --out "$WORK/segments.json" --budget $((t - 30)) \
    --turns "${TRACEPOOL_SEGMENTS_TURNS:-24}" --variants pytorch,pytorch_expandable,classic,growable \
    --workloads gpt2,resnet50,varlen >>"$OUT/torch.log" 2>&1
  echo "==== exit status $?" >>"$OUT/torch.log"
  cp "$WORK/segments.json" "$OUT/bench.json" 2>/dev/null
  while IFS= read -r line; do ROWS+=("$line"); done < <(
    { python3 tests/gpu/segments_bench.py report "$WORK/segments.json" || echo "FAIL|segments bench|segments_bench.py report failed"; } 2>&1 \
      | grep -E '^[A-Za-z]+\|' || echo "FAIL|segments bench|segments_bench.py report printed nothing")
}

if [[ $STEPS == segments ]]; then
  wait_for_package
  if [[ $PY == python3 ]]; then row FAIL "segments bench" "no package to measure"; else segments_step; fi
fi

# ---- 2h. The interposer (issue 34; tests/gpu/intercept_check.py; TRACEPOOL_GPU_STEPS=intercept runs this alone) --
# `run --intercept` over a CUDA C++ program (built with nvcc), CuPy's own pool, PyTorch's own allocator and
# PyTorch with the plugin, each a process of its own; then cudaMalloc+cudaFree pairs with and without it.
intercept_step() {
  local t
  t=$(budget 480 60)
  printf '\n==== intercept_check.py (limit %s s, %s) ====\n' "$t" "$(date +%T)" >>"$OUT/torch.log"
  if ((t == 0)); then row SKIP "intercept" "time budget spent"; return; fi
  timeout -k 10 "$t" "$PY" tests/gpu/intercept_check.py "$WORK/intercept" $((t - 20)) >"$WORK/intercept.log" 2>&1
  echo "==== exit status $?" >>"$WORK/intercept.log"
  cat "$WORK/intercept.log" >>"$OUT/torch.log"
  while IFS= read -r line; do ROWS+=("$line"); done < <(
    grep -E '^(PASS|FAIL|SKIP|meets|misses|info)\|' "$WORK/intercept.log" || echo "FAIL|intercept|intercept_check.py printed no rows")
}

if [[ $STEPS == intercept ]]; then
  wait_for_package
  if [[ $PY == python3 ]]; then row FAIL "intercept" "no package to check"; else intercept_step; fi
fi

# append_log TITLE FILE: FILE's text into conformance.log under a header.
append_log() { { printf '\n==== %s ====\n' "$1"; [[ -f $2 ]] && cat "$2"; } >>"$OUT/conformance.log"; }
# Note [No context as a side effect], in a process of its own so that no device has a context when it starts.
nocontext_step() {
  local log="$WORK/nocontext.log" n
  gtest_step "no context made by questions (fresh)" "$BUILD/tests/tracepool_conformance_tests" "$log" 1 \
    --gtest_filter='*QuestionsAboutADeviceMakeNoContext/cuda*'
  append_log "no context made by questions (fresh process)" "$log"
  n=$(grep -c 'asked about and reported without a context' "$log")
  if ((n == 0)); then row FAIL "no context: devices checked" "every device had a context already: nothing was checked"
  else row PASS "no context: devices checked" "$n device(s) asked about and reported with no context made ($(nvidia-smi -L 2>/dev/null | wc -l) GPUs)"; fi
}
# ---- 5d. Two ranks under torchrun: a report each, and a merged view (tests/gpu/ranks_check.py; run
# between the benchmark rounds below) ------------------------------------------------------------------
ranks_step() {
  local dir="$WORK/ranks" t
  t=$(budget 90 40)
  if ((t == 0)); then row SKIP "ranks: torchrun, two ranks" "time budget spent"; return; fi
  rm -rf "$dir" && mkdir -p "$dir"
  timeout "$t" "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 -m tracepool run \
    -o "$dir/report.json" tests/gpu/ranks_check.py >"$dir/run.log" 2>&1
  local rc=$?
  timeout 60 "$PY" -m tracepool merge -o "$dir/merged.json" "$dir"/report-rank*.json >>"$dir/run.log" 2>&1
  "$PY" -m tracepool merge "$dir"/report-rank*.json >>"$OUT/torch.log" 2>&1
  local line
  line=$("$PY" tests/gpu/ranks_check.py compare "$dir" 2>&1 | tail -1)
  if ((rc != 0)); then row FAIL "ranks: torchrun, two ranks" "torchrun exit $rc: $(tail -3 "$dir/run.log" | tr '\n' ' ' | cut -c1-300)"
  else ROWS+=("$line"); fi
  tail -40 "$dir/run.log" >>"$OUT/torch.log"
}


# ---- 2f. Two GPUs: no context on a device a process never used (issue 31, item 1), the ranks' reports, and
# copies between devices of growable segments (issue 18). TRACEPOOL_GPU_STEPS=multi runs these alone (on the
# nvidia-h100-x2 kind); with one GPU the two-GPU rows skip, saying so.
gpu_count() { nvidia-smi -L 2>/dev/null | grep -c '^GPU'; }
contexts_step() {
  local dir="$WORK/contexts" t rc line n
  n=$(gpu_count)
  if ((n < 2)); then row SKIP "no context on the other rank's GPU (2 ranks)" "needs two GPUs (nvidia-h100-x2); $n here"; return; fi
  t=$(budget 150 40)
  if ((t == 0)); then row SKIP "no context on the other rank's GPU (2 ranks)" "time budget spent"; return; fi
  rm -rf "$dir" && mkdir -p "$dir"
  CUDA_DEVICE_ORDER=PCI_BUS_ID TRACEPOOL_REPORT="$dir/exit.json" timeout "$t" "$PY" -m torch.distributed.run --standalone \
    --nproc-per-node 2 tests/gpu/contexts_check.py "$dir" >"$dir/run.log" 2>&1
  rc=$?
  line=$("$PY" tests/gpu/contexts_check.py compare "$dir" 2>&1 | tail -1)
  if ((rc != 0)); then row FAIL "no context on the other rank's GPU (2 ranks)" "torchrun exit $rc: $(tail -3 "$dir/run.log" | tr '\n' ' ' | cut -c1-300)"
  else ROWS+=("$line"); fi
  { echo "==== contexts_check.py (2 ranks) ===="; tail -30 "$dir/run.log"; cat "$dir"/contexts-rank*.json; ls "$dir"; } >>"$OUT/torch.log" 2>&1
}
peer_step() {
  local conf line n
  n=$(gpu_count)
  if ((n < 2)); then row SKIP "peer copies between two devices" "needs two GPUs (nvidia-h100-x2); $n here"; return; fi
  for conf in segments:classic segments:growable; do
    line=$(timeout 120 "$PY" tests/gpu/peer_check.py "$conf" 2>>"$OUT/torch.log" | grep -E '^[A-Z]+\|' | tail -1)
    ROWS+=("${line:-FAIL|peer copies between two devices ($conf)|peer_check.py printed no row}")
  done
}

if [[ $STEPS == multi ]]; then
  nocontext_step
  wait_for_package
  contexts_step
  peer_step
  ranks_step
fi

# ---- 2g. PyTorch's own tests beside tracepool (issue 32; TRACEPOOL_GPU_STEPS=torch_tests runs this alone) --
# tests/gpu/torch_own_tests.py: each selected test of PyTorch's test_cuda.py and test_cuda_multigpu.py in a
# process of its own, natively and with tracepool installed, side by side. Needs tests/gpu/torch_tests from
# tests/gpu/get_torch_tests.sh (git-ignored: the device call carries it). Lines go to torch.log, the JSON to
# bench.json. TRACEPOOL_TORCH_TESTS_SET: core (default: the 51), wide (all 128; more than one call's
# time) or rest (wide less core, for a second call); TRACEPOOL_TORCH_TESTS_MATCH: a regular expression, only the
# set's tests whose node id it finds; TRACEPOOL_TORCH_TESTS_GRAPHS=0 leaves the graph rows out;
# TRACEPOOL_TORCH_TESTS_JOBS: processes at a time (8).
# A test that passes natively and not under tracepool is a FAIL row, unless its line names the reason
# (Note [Named exceptions] in torch_own_tests.py: an info row with the reason); the counts are info rows.
torch_tests_step() {
  local set=${TRACEPOOL_TORCH_TESTS_SET:-core} json=$WORK/torch_own_tests.json t
  t=$(budget 570 60)
  printf '\n==== torch_own_tests.py --set %s (limit %s s, %s) ====\n' "$set" "$t" "$(date +%T)" >>"$OUT/torch.log"
  if ((t == 0)); then row SKIP "PyTorch's own tests" "time budget spent"; return; fi
  timeout -k 10 "$t" "$PY" tests/gpu/torch_own_tests.py --set "$set" --jobs "${TRACEPOOL_TORCH_TESTS_JOBS:-8}" \
    ${TRACEPOOL_TORCH_TESTS_MATCH:+--match "$TRACEPOOL_TORCH_TESTS_MATCH"} --budget $((t - 15)) --json "$json" \
    >>"$OUT/torch.log" 2>&1
  echo "==== exit status $?" >>"$OUT/torch.log"
  cp "$json" "$OUT/bench.json" 2>/dev/null
  local line
  while IFS= read -r line; do ROWS+=("$line"); done < <(python3 - "$json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print("FAIL|PyTorch's own tests|no result (%s); see torch.log" % e); sys.exit()
if d["skipped"]:
    print("SKIP|PyTorch's own tests|%s" % d["skipped"][:300]); sys.exit()
for name, s in d["summary"].items():
    print("info|PyTorch's own tests, %s set|native %d pass, tracepool %d pass (of %d; %d not run)"
          % (name, s["native_pass"], s["tracepool_pass"], s["tests"], s["not_run"]))
pool = {t["id"]: t["tracepool"] for t in d["tests"]}
last = list(d["summary"].values())[-1]
for node_id in last["regressions"]:
    print("FAIL|own test: %s|passes natively; under tracepool %s: %s"
          % (node_id.split("::", 1)[1], pool[node_id]["result"], pool[node_id]["detail"][:200].replace("|", "/")))
for node_id, reason in last["exceptions"].items():  # Note [Named exceptions] in torch_own_tests.py
    print("info|own test, named exception: %s|%s" % (node_id.split("::", 1)[1], reason[:300].replace("|", "/")))
for node_id in last["exceptions_passing"]:
    print("info|own test, named exception now passes: %s|drop its reason from torch_own_tests.txt"
          % node_id.split("::", 1)[1])
PY
)
}

if [[ $STEPS == torch_tests ]]; then
  wait_for_package
  if [[ $PY == python3 ]]; then
    row FAIL "PyTorch's own tests" "no package to test"
  else
    # First the CUDA-graph trees with a second path and reuse inside a capture (graph_check.py's rows, native and tracepool), so
    # that a long test run cannot crowd them out.
    if [[ ${TRACEPOOL_TORCH_TESTS_GRAPHS:-1} != 0 ]]; then
      check_step graph native.1 --allocator native --checks reduce_overhead,tree_train_eval,tree_shapes_kept,capture_reuse
      check_step graph tracepool.1 --allocator tracepool --checks reduce_overhead,tree_train_eval,tree_shapes_kept,capture_reuse
      while IFS= read -r line; do ROWS+=("$line"); done < <(
        python3 tests/gpu/graph_check.py compare "$WORK"/graph.native.1.json -- "$WORK"/graph.tracepool.1.json 2>&1 \
          | grep -E '^(PASS|FAIL)\|graphs: ' || echo "FAIL|CUDA graphs|graph_check.py compare printed nothing")
    fi
    torch_tests_step
  fi
fi

# ---- 3. C++ tests ---------------------------------------------------------------------------------
if [[ $STEPS == all ]]; then
gtest_step "conformance tests (*cuda*)" "$BUILD/tests/tracepool_conformance_tests" "$OUT/conformance.log" 1 \
  --gtest_filter='*cuda*'
nocontext_step

# ---- 3b. CUDA stress suite, and compute-sanitizer ---------------------------------------------------
# The output of each run goes to conformance.log under a ==== header; the stress suite's own lines
# ("stress[...]: ... N mismatched") give its row's detail. On the H200 (2026-11-23, one run) the plain
# suite took about 2 s and each sanitizer run a few seconds (kernels 10-100 times slower, so few
# iterations there), all while pip builds in the background. Left out, and why:
# - memcheck, conformance: RequestBeyondTheDeviceFailsCleanly, whose cuMemAlloc fails on purpose;
#   memcheck counts each failing driver call as an error (2, CUDA_ERROR_OUT_OF_MEMORY).
# - sanitizers, stress: NegativeControl.StreamUnawareCacheIsCaught, which needs many iterations and
#   kernels that overlap (it skips, saying so, where they do not); AtExit.*, which keeps memory cached
#   until exit on purpose and has its own row below.
# - racecheck: the limit test. Racecheck checks the kernels' shared memory, which the limit does not
#   change; in the only racecheck run so far (H200, 2026-11-23, 40 iterations) that test had not
#   finished after 45 s, the rest of the suite took 4.5 s (cause not established: slow or stuck).
STRESS=$BUILD/tests/gpu/tracepool_cuda_stress_tests
SANITIZER=$(command -v compute-sanitizer || ls "$CUDA_HOME"/bin/compute-sanitizer 2>/dev/null | head -1)


# stress_detail LOG: "tracepool: 60000 blocks, 2000 moved, 0 mismatched; ..." from the suite's lines.
stress_detail() {
  sed -nE 's/^stress\[([^]]*)\]: [^:]*: ([0-9]+) blocks, [0-9]+ also on a second stream, ([0-9]+) moved to another stream, ([0-9]+) mismatched.*/\1: \2 blocks, \3 moved, \4 mismatched/p' "$1" \
    | paste -sd';' | sed 's/;/; /g'
}

# sanitizer_step NAME CAP "OPTIONS" BINARY [ARGS...]: BINARY under compute-sanitizer OPTIONS, at most CAP
# seconds. --error-exitcode makes any error it reports fail the row; the row gives its ERROR SUMMARY.
SAN_ERROR_EXIT=86
sanitizer_step() {
  local name=$1 cap=$2 opts=$3 bin=$4 log=$WORK/sanitizer.log t rc ran pass fail skip summary extra start
  shift 4
  t=$(budget "$cap" 20)
  if [[ -z $SANITIZER ]]; then row FAIL "$name" "compute-sanitizer not found (PATH, $CUDA_HOME/bin)"; return; fi
  if [[ ! -x $bin ]]; then row FAIL "$name" "missing: $bin"; return; fi
  if ((t == 0)); then row SKIP "$name" "time budget spent"; return; fi
  start=$SECONDS
  # shellcheck disable=SC2086  # OPTIONS is a list of words
  timeout -k 5 "$t" "$SANITIZER" $opts --error-exitcode "$SAN_ERROR_EXIT" "$bin" "$@" >"$log" 2>&1
  rc=$?
  append_log "compute-sanitizer $opts $(basename "$bin") $* (exit status $rc, $((SECONDS - start)) s)" "$log"
  read -r ran pass fail skip < <(gtest_counts "$log")
  summary=$(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' "$log" | tail -1)
  # racecheck ends with "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)" instead.
  if [[ -z $summary ]] && grep -qE 'RACECHECK SUMMARY: .*\(0 errors' "$log"; then summary='ERROR SUMMARY: 0 errors'; fi
  extra=$(grep -oE '(RACECHECK|LEAK) SUMMARY: .*' "$log" | tail -1)
  extra="$pass passed, $fail failed, $skip skipped of $ran${extra:+; $extra}; $((SECONDS - start)) s"
  if ((rc == 124 || rc == 137)); then
    row FAIL "$name" "timed out after ${t}s in $(sed -nE 's/^\[ RUN +\] //p' "$log" | tail -1); ${summary:-no ERROR SUMMARY}; $extra"
  elif [[ -z $summary ]]; then row FAIL "$name" "exit $rc, no ERROR SUMMARY from compute-sanitizer; $extra"
  elif [[ $summary != 'ERROR SUMMARY: 0 errors' ]]; then row FAIL "$name" "$summary; $extra"
  elif ((rc != 0)); then row FAIL "$name" "exit $rc; $summary; $extra"
  elif ((pass == 0)); then row FAIL "$name" "$summary; $extra: all skipped, was a GPU seen?"
  else row PASS "$name" "$summary; $extra"; fi
}

# Plainly the negative controls must run (kernels of two streams overlap on a GPU): no skip allowed.
TRACEPOOL_STRESS_CONF=segments:classic TRACEPOOL_STRESS_REQUIRE_OVERLAP=1 gtest_step "CUDA stress (4 streams, kernels check)" \
  "$STRESS" "$WORK/stress.log" 1
append_log "tracepool_cuda_stress_tests (exit status of the row above)" "$WORK/stress.log"
detail=$(stress_detail "$WORK/stress.log" 2>/dev/null) && [[ -n $detail ]] && ROWS[-1]+="; $detail"

# The plain row runs classic segments, whose whole idle segments move between streams (the row requires
# it). The stress suite again on growable segments (CUDA's default): no address moves between streams there (each stream maps
# into a range of its own), and under the limit the retries unmap pieces while kernels run on every stream.
TRACEPOOL_STRESS_CONF=segments:growable TRACEPOOL_STRESS_REQUIRE_MOVED=0 gtest_step "CUDA stress, growable segments" \
  "$STRESS" "$WORK/stress_growable.log" 1 --gtest_filter='StreamStress.*'
append_log "tracepool_cuda_stress_tests, segments:growable (exit status of the row above)" "$WORK/stress_growable.log"
detail=$(stress_detail "$WORK/stress_growable.log" 2>/dev/null) && [[ -n $detail ]] && ROWS[-1]+="; $detail"

sanitizer_step "memcheck: conformance (*cuda*)" 60 "--tool memcheck --leak-check full" \
  "$BUILD/tests/tracepool_conformance_tests" --gtest_filter='*cuda*:-*RequestBeyondTheDeviceFailsCleanly*:*RefuseADoubleMap*'
TRACEPOOL_STRESS_CONF=segments:classic TRACEPOOL_STRESS_REQUIRE_MOVED=0 TRACEPOOL_STRESS_ITERATIONS=${TRACEPOOL_GPU_MEMCHECK_ITERATIONS:-100} sanitizer_step "memcheck: stress" 60 \
  "--tool memcheck --leak-check full" "$STRESS" --gtest_filter='-AtExit.*:NegativeControl.StreamUnawareCacheIsCaught'
TRACEPOOL_STRESS_CONF=segments:growable TRACEPOOL_STRESS_REQUIRE_MOVED=0 TRACEPOOL_STRESS_ITERATIONS=${TRACEPOOL_GPU_MEMCHECK_ITERATIONS:-100} \
  sanitizer_step "memcheck: stress, growable segments" 60 "--tool memcheck --leak-check full" "$STRESS" --gtest_filter='StreamStress.*'
TRACEPOOL_STRESS_REQUIRE_MOVED=0 TRACEPOOL_STRESS_ITERATIONS=${TRACEPOOL_GPU_RACECHECK_ITERATIONS:-40} sanitizer_step "racecheck: stress" 60 \
  "--tool racecheck" "$STRESS" \
  --gtest_filter='StreamStress.NoBlockIsHandedOutWhileInUseOnAnyStream:NegativeControl.Checker*:NegativeControl.BufferShared*'

# Memory that tracepool keeps cached at exit: tracepool_default() holds its segments until the process
# ends, as under PyTorch (AtExit.*). memcheck's leak check reports each such segment as a leak (and an
# error): 2 on the H200, 22 MiB. An info row, saying what it found; a FAIL only if the test fails or
# memcheck reports anything besides those leaks.
t=$(budget 30 20)
if [[ -z $SANITIZER || ! -x $STRESS ]]; then row FAIL "memcheck: cache kept at exit" "compute-sanitizer or $STRESS missing"
elif ((t == 0)); then row SKIP "memcheck: cache kept at exit" "time budget spent"
else
  timeout -k 5 "$t" "$SANITIZER" --tool memcheck --leak-check full "$STRESS" --gtest_filter='AtExit.*' \
    >"$WORK/at_exit.log" 2>&1
  rc=$?
  append_log "compute-sanitizer --tool memcheck --leak-check full tracepool_cuda_stress_tests --gtest_filter=AtExit.* (exit status $rc)" \
    "$WORK/at_exit.log"
  kept=$(sed -nE 's/^at exit: tracepool_default\(\) keeps ([0-9]+) bytes in ([0-9]+) segments cached.*/\1 bytes in \2 segments/p' "$WORK/at_exit.log")
  leaks=$(grep -cE 'Leaked [0-9,]+ bytes' "$WORK/at_exit.log")
  leaked=$(grep -oE 'Leaked [0-9,]+ bytes' "$WORK/at_exit.log" | tr -d , | awk '{s += $2} END {print s + 0}')
  summary=$(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' "$WORK/at_exit.log" | tail -1)
  errors=$(grep -oE '[0-9]+' <<<"${summary:-x 0}" | head -1)
  detail="tracepool_default() kept ${kept:-?} cached; memcheck: $leaks leaks ($leaked bytes), ${summary:-no ERROR SUMMARY}"
  if ((rc != 0)) || [[ -z $summary || -z $kept ]]; then row FAIL "memcheck: cache kept at exit" "exit $rc; $detail"
  elif ((errors > leaks)); then row FAIL "memcheck: cache kept at exit" "errors besides leaks; $detail"
  else row info "memcheck: cache kept at exit" "$detail"; fi
fi

TRACEPOOL_CONF=backend:host gtest_step "unit tests (host backend)" "$BUILD/tests/tracepool_unit_tests" \
  "$OUT/unit.log" 0

# The C (find_package and pkg-config), C++ and ctypes examples, built against an install of this build
# as CI builds them, run on CUDA (tests/install/examples.cmake); their output goes to conformance.log.
t=$(budget 90 20)
if ((t == 0)); then
  row SKIP "examples on CUDA (C, C++, ctypes)" "time budget spent"
else
  passed=() failed=()
  for e in c c_pkgconfig cpp ctypes; do
    if timeout -k 5 "$t" cmake -DBUILD_DIR="$BUILD" -DEXAMPLES="$ROOT/examples" -DWORK_DIR="$WORK/examples_$e" \
      -DCC="${CC:-cc}" -DPYTHON=python3 -DEXAMPLE="$e" -DBACKEND=cuda -P tests/install/examples.cmake \
      >>"$WORK/examples.log" 2>&1; then passed+=("$e"); else failed+=("$e"); fi
  done
  { echo; echo "==== examples on CUDA (tests/install/examples.cmake) ===="; cat "$WORK/examples.log"; } >>"$OUT/conformance.log"
  if ((${#failed[@]})); then row FAIL "examples on CUDA (C, C++, ctypes)" "failed: ${failed[*]}; passed: ${passed[*]:-none} (conformance.log)"
  else row PASS "examples on CUDA (C, C++, ctypes)" "${passed[*]}: each built against an install and its leak flagged GROWING at its site"; fi
fi

# The capture probe: which driver calls break a CUDA graph capture (Note [Capture-safe calls] in
# core/backend/cuda_backend.cpp). Its table goes to conformance.log; the row counts what broke.
PROBE=$BUILD/tests/gpu/tracepool_capture_probe
if [[ ! -x $PROBE ]]; then
  row FAIL "capture probe" "missing: $PROBE"
else
  timeout -k 5 60 "$PROBE" >"$WORK/probe.log" 2>&1
  rc=$?
  append_log "capture probe" "$WORK/probe.log"
  broken=$(grep -c 'BROKEN' "$WORK/probe.log")
  relaxed=$(grep -E '^cuMemAlloc \(relaxed\) +global +same' "$WORK/probe.log" | awk '{print $NF}')
  if ((rc != 0)); then row FAIL "capture probe" "exit $rc, see conformance.log"
  else row info "capture probe" "$broken of $(grep -cE 'survived|BROKEN' "$WORK/probe.log") call/mode/thread cases broke the capture; cuMemAlloc in relaxed mode, global capture: ${relaxed:-?} (table in conformance.log)"; fi
fi

wait_for_package  # nothing timed runs beside the build

# ---- 4. C++ benchmark -----------------------------------------------------------------------------
BENCH=$BUILD/tests/tracepool_bench
t=$(budget 120)
if [[ ! -x $BENCH ]]; then
  row FAIL "benchmark" "missing: $BENCH"
elif ((t == 0)); then
  row SKIP "benchmark" "time budget spent"
else
  timeout -k 5 "$t" "$BENCH" --benchmark_filter='^BM_CachedPair' --benchmark_min_time=0.2s \
    --benchmark_repetitions=3 --benchmark_out="$OUT/bench.json" --benchmark_out_format=json >"$OUT/bench.log" 2>&1
  rc=$?
  if ((rc == 124)); then row FAIL "benchmark" "timed out after $t s, see bench.log"
  elif ((rc != 0)); then row FAIL "benchmark" "exit $rc, see bench.log"; fi
  # One row per figure: STATUS|step|detail, from the median of the repetitions.
  while IFS= read -r line; do ROWS+=("$line"); done < <(python3 - "$OUT/bench.json" <<'PY'
import json, re, statistics, sys
unit = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}
runs, errors = {}, {}
try:
    for b in json.load(open(sys.argv[1]))["benchmarks"]:
        if b.get("error_occurred"):
            errors.setdefault(b["name"].split("/threads:")[0].replace("/real_time", ""), b.get("error_message", "")[:90].strip())
        elif b.get("run_type", "iteration") == "iteration":
            runs.setdefault(b.get("run_name", b["name"]), []).append(b["real_time"] * unit[b.get("time_unit", "ns")])
except (OSError, ValueError, KeyError) as e:
    print("FAIL|benchmark|no usable bench.json: %s" % e); sys.exit()
ns = {k: statistics.median(v) for k, v in runs.items()}
def find(prefix, threads):  # real_time of a multi-threaded run is wall time / all threads' iterations
    for k, v in sorted(ns.items()):
        m = re.search(r"/threads:(\d+)", k)
        if k.startswith(prefix) and (int(m.group(1)) if m else 1) == threads: return v
def why(name):
    return "errored: " + errors[name] if name in errors else name + " missing, see bench.log"
for be in ("cuda", "host"):
    v = find("BM_CachedPair/" + be, 1)
    print("FAIL|bench cached pair, %s|%s" % (be, why("BM_CachedPair/" + be)) if v is None else
          "%s|bench cached pair, %s|%.1f ns per alloc+free (target < 100 ns)" % ("meets" if v < 100 else "misses", be, v))
one, eight = find("BM_CachedPairThreads/cuda", 1) or find("BM_CachedPair/cuda", 1), find("BM_CachedPairThreads/cuda", 8)
if one is None or eight is None:
    print("FAIL|bench 8-thread scaling, cuda|%s" % why("BM_CachedPairThreads/cuda"))
else:
    r = one / eight
    print("%s|bench 8-thread scaling, cuda|%.2fx throughput of 1 thread (target >= 4x)" % ("meets" if r >= 4 else "misses", r))
PY
)
fi

# ---- 4b. Call-site capture benchmark (host backend, through libtracepool.so) ------------------------
# cfi and boost are measured (this machine has no libunwind); its JSON stays in WORK.
TRACE_BENCH=$BUILD/tests/tracepool_trace_bench
t=$(budget 90)
if [[ ! -x $TRACE_BENCH ]]; then
  row FAIL "trace bench" "missing: $TRACE_BENCH"
elif ((t == 0)); then
  row SKIP "trace bench" "time budget spent"
else
  timeout -k 5 "$t" "$TRACE_BENCH" --benchmark_min_time=0.2s --benchmark_repetitions=3 \
    --benchmark_out="$WORK/trace_bench.json" --benchmark_out_format=json >"$WORK/trace_bench.log" 2>&1
  rc=$?
  if ((rc == 124)); then row FAIL "trace bench" "timed out after $t s, see bench.log"
  elif ((rc != 0)); then row FAIL "trace bench" "exit $rc, see bench.log"; fi
  # Medians of the repetitions; "added" is traced minus untagged, per allocation (one alloc+free).
  while IFS= read -r line; do ROWS+=("$line"); done < <(python3 - "$WORK/trace_bench.json" <<'PY'
import json, statistics, sys
unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
vals, errors = {}, {}  # "name" -> seconds per iteration, "name:counter" -> counter values
try:
    for b in json.load(open(sys.argv[1]))["benchmarks"]:
        name = b.get("run_name", b["name"]).split("/iterations:")[0]
        if b.get("error_occurred"):
            errors[name] = b.get("error_message", "")[:90].strip()
        elif b.get("run_type", "iteration") == "iteration":
            vals.setdefault(name, []).append(b["real_time"] * unit[b.get("time_unit", "ns")])
            for k in ("added_ns", "sampled_ns", "untagged_ns", "bytes", "first_s", "sites", "blocks"):
                if k in b:
                    vals.setdefault(name + ":" + k, []).append(b[k])
except (OSError, ValueError, KeyError) as e:
    print("FAIL|trace bench|no usable trace_bench.json: %s" % e); sys.exit()
med = lambda k: statistics.median(vals[k]) if k in vals else None
def why(name):
    return "errored: " + errors[name] if name in errors else name + " missing, see bench.log"
def verdict(ok):
    return "meets" if ok else "misses"
base = med("BM_Pair/untagged")
for u in ("cfi", "boost", "libunwind"):  # libunwind only where it loaded (not on this machine)
    name, step = "BM_Pair/%s/depth:32" % u, "trace capture cost, %s depth 32" % u
    v = med(name)
    if base is None or v is None:
        if u != "libunwind" or name in errors:
            print("FAIL|%s|%s" % (step, why("BM_Pair/untagged" if base is None else name)))
        continue
    added = (v - base) * 1e9
    print("%s|%s|%+.0f ns per allocation vs untagged (%.0f vs %.0f ns per alloc+free, %.1fx) (target <= 1000 ns)"
          % (verdict(added <= 1000), step, added, v * 1e9, base * 1e9, v / base))
unw = "libunwind" if "BM_Pair/libunwind/depth:32" in vals else "cfi"
sites, hist = med("BM_Pair/%s/depth:32" % unw), med("BM_Pair/history")
if sites is None or hist is None:
    print("FAIL|trace history cost, %s depth 32|%s" % (unw, why("BM_Pair/history")))
else:
    added = (hist - sites) * 1e9
    print("%s|trace history cost, %s depth 32|%+.0f ns per alloc+free pair over call sites alone (%.0f vs %.0f ns;"
          " history:100000) (target <= 200 ns)" % (verdict(added <= 200), unw, added, hist * 1e9, sites * 1e9))
added, s, u = (med("BM_SampledMix/1MiB:" + k) for k in ("added_ns", "sampled_ns", "untagged_ns"))
if added is None:
    print("FAIL|trace sampled 1 MiB, added ns|%s" % why("BM_SampledMix/1MiB"))
else:
    print("%s|trace sampled 1 MiB, added ns|%+.1f ns per allocation on average (%s, depth 32, sizes 512 B..64 KiB:"
          " %.1f vs %.1f ns untagged) (target <= 50 ns)" % (verdict(added <= 50), added, unw, s, u))
js, tx = med("BM_Report/json"), med("BM_Report/text")
if js is None or tx is None:
    print("FAIL|trace report, 100k blocks|%s" % why("BM_Report/json" if js is None else "BM_Report/text"))
else:
    print("%s|trace report, 100k blocks|json %.3f s (%.1f MiB, %.0f sites; first in process %.3f s), text %.3f s"
          " (target < 1 s)" % (verdict(max(js, tx) < 1), js, (med("BM_Report/json:bytes") or 0) / 2**20,
                               med("BM_Report/json:sites") or 0, med("BM_Report/json:first_s") or 0, tx))
PY
)
fi

# ---- 5. PyTorch checks, seed scenarios, benchmarks -------------------------------------------------
# torch_step LABEL ROUND CHECKS ALLOCATOR [ARGS]: one torch_check.py process; its output goes to
# WORK/LABEL.ROUND.{out,rc} and torch.log. A process is not started with less than NEED (default 30)
# seconds of the budget left: it prints skip records instead.
torch_step() {
  local base=$WORK/$1.$2 t rc
  t=$(budget 150 "${NEED:-30}")
  printf '\n==== %s --allocator %s %s (round %s, limit %s s, %s) ====\n' "$3" "$4" "${*:5}" "$2" "$t" "$(date +%T)" \
    >>"$OUT/torch.log"
  if ((t == 0)); then
    "$PY" tests/gpu/torch_check.py "$3" --allocator "$4" "${@:5}" --skip "time budget spent" >"$base.out" 2>&1
    rc=$?
  else
    timeout -k 5 "$t" "$PY" tests/gpu/torch_check.py "$3" --allocator "$4" --lib "$LIB" --ref-lib "$REF" "${@:5}" \
      >"$base.out" 2>&1
    rc=$?
  fi
  echo "$rc" >"$base.rc"
  cat "$base.out" >>"$OUT/torch.log"
  echo "==== exit status $rc" >>"$OUT/torch.log"
}

# Training losses, native vs tracepool untagged (capture:off) vs traced (capture:native, which also
# writes a JSON report at its end, once with the auto unwinder and once with boost's).
torch_step train.native 1 train native
torch_step train.tracepool 1 train tracepool
torch_step train.traced 1 train traced --report "$WORK/train.traced.report.json"
torch_step train.traced_boost 1 train traced_boost --report "$WORK/train.traced_boost.report.json"
# The allocation history (history:N) drawn by torch.cuda._memory_viz; its HTML timeline stays in WORK.
torch_step viz.tp_history 1 history_viz tp_history --report "$WORK/history_timeline.html"

# The seed scenarios and the torch.cuda memory API (tests/gpu/torch_seeds.py): small and untimed, so
# all at once, each in its own process: WORK/seed.NAME.{out,rc}.
SEEDS=(validation_outputs losses_append closure freed_cached api oom backward pool)
growth_step &  # beside the seeds: neither is timed (the holder search times only itself)
t=$(budget 120 40)
for s in "${SEEDS[@]}"; do
  if ((t == 0)); then
    printf '{"seed": "%s", "rows": [["SKIP", "scenario %s", "time budget spent"]]}\n' "$s" "$s" >"$WORK/seed.$s.out"
    echo 0 >"$WORK/seed.$s.rc"
  else
    (timeout -k 5 "$t" "$PY" tests/gpu/torch_seeds.py "$s" >"$WORK/seed.$s.out" 2>&1; echo $? >"$WORK/seed.$s.rc") &
  fi
done
wait
for s in "${SEEDS[@]}"; do
  { printf '\n==== torch_seeds.py %s (exit status %s) ====\n' "$s" "$(cat "$WORK/seed.$s.rc")"; cat "$WORK/seed.$s.out"; } \
    >>"$OUT/torch.log"
done
growth_rows

# ---- 5b. CUDA graphs, reduce-overhead, MemPool, OOM observers (tests/gpu/graph_check.py) ------------
# One process per allocator runs every check; then four fresh processes (order ABBA) run the graph
# benchmarks, two rounds each (a process that ran the checks is not timed: under PyTorch's own
# allocator the failed capture, run last, leaves its pool's route open). graph_check.py compare gives
# the rows. Before the PyTorch benchmarks, so that a short budget skips those rather than these.
# torch.compile's kernels are cached on disk after the first process, so later compiles are quick.
check_step graph native.1 --allocator native
check_step graph tracepool.1 --allocator tracepool
check_step graph tracepool.2 --allocator tracepool --checks "" --bench
check_step graph native.2 --allocator native --checks "" --bench
check_step graph native.3 --allocator native --checks "" --bench
check_step graph tracepool.3 --allocator tracepool --checks "" --bench
while IFS= read -r line; do ROWS+=("$line"); done < <(
  python3 tests/gpu/graph_check.py compare "$WORK"/graph.native.{1,2,3}.json -- "$WORK"/graph.tracepool.{1,2,3}.json 2>&1 \
    | grep -E '^[A-Za-z]+\|' || echo "FAIL|CUDA graphs|graph_check.py compare printed nothing")

# ---- 5c. CuPy, Numba, and PyTorch + CuPy + Numba in one process (tests/gpu/hosts_check.py) ----------
# One process per allocator runs the checks (native: each runtime its own pool; tracepool: one pool for
# all three), then six fresh processes (native, tracepool, tracepool_off, then the reverse) time CuPy
# and Numba loops: CuPy's against CuPy's own pool in the same process, reps alternating (the spread
# between processes on the H200 was as large as the differences measured), Numba's (whose manager is
# fixed per process) against the native processes; hosts_check.py compare gives the rows.
check_step hosts native.1 --allocator native
check_step hosts tracepool.1 --allocator tracepool
round=2
for a in native tracepool tracepool_off tracepool_off tracepool native; do
  check_step hosts "$a.$round" --allocator "$a" --checks "" --bench
  [[ $a == tracepool_off && $round == 2 ]] && round=3
done
if compgen -G "$WORK/hosts.*.json" >/dev/null || [[ $SKIPPED_CHECKS != *" hosts."* ]]; then
  while IFS= read -r line; do ROWS+=("$line"); done < <(
    python3 tests/gpu/hosts_check.py compare "$WORK"/hosts.*.json 2>&1 \
      | grep -E '^[A-Za-z]+\|' || echo "FAIL|CuPy/Numba|hosts_check.py compare printed nothing")
else
  row SKIP "CuPy/Numba (hosts_check.py)" "time budget spent"
fi


# Where nvidia-smi's memory went (Note [Where the memory went]): the driver's figure, then by process.
accounting_step() {
  local dir="$WORK/accounting" t
  t=$(budget 60 30)
  if ((t == 0)); then row SKIP "nvidia-smi accounting" "time budget spent"; return; fi
  rm -rf "$dir" && mkdir -p "$dir"
  timeout "$t" "$PY" -m tracepool run tests/gpu/ranks_check.py accounting "$dir/accounting.json" >"$dir/run.log" 2>&1
  while IFS= read -r line; do ROWS+=("$line"); done < <(
    "$PY" tests/gpu/ranks_check.py compare-accounting "$dir/accounting.json" 2>&1 | tail -2)
  tail -20 "$dir/run.log" >>"$OUT/torch.log"
}

# Benchmarks: one process per allocator runs them all (empty_loop: torch.empty alloc+free pairs;
# inference: ResNet-18 at batch 1; the ResNet-50 and GPT-2 training steps). native also times each
# under PyTorch's own history (stacks python, then all). tracepool is untagged (capture:off), tp_python
# records Python call sites, tp_all Python and native frames. Two rounds, the second in reverse order
# (a round takes about 105 s here; a round the budget cannot fit is skipped process by process); the
# report keeps each one's best round, so one slow process does not decide a ratio. After the first the
# reference plugins run once: the minimal plugin, and tracepool (untagged) with its own time measured.
BENCH_CHECKS=empty_loop,inference,resnet_step,gpt2_step
bench_round() {
  local round=$1 a
  shift
  for a in "$@"; do
    if [[ $a == native ]]; then NEED=60 torch_step "bench.$a" "$round" "$BENCH_CHECKS" native --history
    elif [[ $a == tp_history ]]; then NEED=30 torch_step "bench.$a" "$round" empty_loop tp_history
    else NEED=45 torch_step "bench.$a" "$round" "$BENCH_CHECKS" "$a"; fi
  done
}
bench_round 1 native tracepool tp_python tp_history tp_all
for a in minimal timed; do NEED=40 torch_step "bench.$a" 1 gpt2_step,resnet_step "$a"; done
accounting_step
contexts_step
peer_step
ranks_step  # after the first round of benchmarks, which every benchmark row needs; before the second
bench_round 2 tp_all tp_history tp_python tracepool native

while IFS= read -r line; do ROWS+=("$line"); done < <(
  { python3 tests/gpu/torch_check.py report "$WORK" || echo "FAIL|torch report|torch_check.py report failed"; } 2>&1 \
    | grep -E '^[A-Za-z]+\|' || echo "FAIL|torch report|torch_check.py report printed nothing")
while IFS= read -r line; do ROWS+=("$line"); done < <(
  { python3 tests/gpu/torch_seeds.py report "$WORK" || echo "FAIL|torch seeds|torch_seeds.py report failed"; } 2>&1 \
    | grep -E '^[A-Za-z]+\|' || echo "FAIL|torch seeds|torch_seeds.py report printed nothing")

fi  # STEPS == all

# ---- Summary --------------------------------------------------------------------------------------
[[ -f $WORK/trace_bench.log ]] && { printf '\n==== trace bench (tracepool_trace_bench) ====\n'; cat "$WORK/trace_bench.log"; } >>"$OUT/bench.log"
nfail=0
{
  echo "## tracepool GPU check: $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date '+%F %T'), $SECONDS s"
  echo
  printf '| %-38s | %-6s | %s\n' step result "detail |"
  printf '|%s|%s|---|\n' "----------------------------------------" "--------"
  for r in "${ROWS[@]}"; do
    IFS='|' read -r status step detail <<<"$r"
    [[ $status == FAIL ]] && nfail=$((nfail + 1))
    printf '| %-38s | %-6s | %s |\n' "$step" "$status" "${detail//|//}"
  done
  echo
  if ((nfail)); then echo "**FAIL**: $nfail row(s) failed; logs in $OUT"; else echo "**PASS**; logs in $OUT"; fi
} >"$OUT/summary.md"
cat "$OUT/summary.md"
((nfail == 0))
