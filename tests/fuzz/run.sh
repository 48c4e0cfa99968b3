#!/usr/bin/env bash
# Fuzzes the C API for a fixed time: builds build-fuzz/ with clang (libFuzzer, ASan+UBSan; the library
# instrumented for coverage too), then runs inputs with one thread and inputs with several threads,
# SECONDS each, on a copy of tests/fuzz/corpus, and then the saved-report reader (report_fuzzer.cpp,
# tracepool_render_report) for SECONDS on a copy of tests/fuzz/report_corpus. Prints executions, coverage and corpus size per run;
# exits non-zero if a run crashed, with the path of the saved input in the output. Replay one with
# ASAN_OPTIONS=verify_asan_link_order=0 build-fuzz/tests/fuzz/tracepool_api_fuzzer FILE (add
# TRACEPOOL_FUZZ_TRACE=1 to see its ops); keep it as a test in tests/fuzz/regressions/.
#   tests/fuzz/run.sh [SECONDS]   # default 60
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-60}"
build=build-fuzz
bash .ci/deps  # clang and libclang-rt-14-dev among the rest; cheap when all are present
jobs="$(nproc)"
[ "$jobs" -le 2 ] || jobs=2

# The library is a shared object: with clang it takes the sanitizer runtime as a shared library too
# (-shared-libsan), found through the rpath. The core's -Werror meets clang warnings gcc does not have.
runtime="$(clang -print-resource-dir)/lib/linux"
flags="-fsanitize=fuzzer-no-link -shared-libsan"
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTRACEPOOL_BUILD_TESTS=ON -DTRACEPOOL_BUILD_FUZZERS=ON -DTRACEPOOL_BUILD_EXAMPLES=OFF -DTRACEPOOL_SANITIZE=address \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags -Wno-error=unused-private-field" \
  -DCMAKE_EXE_LINKER_FLAGS="-shared-libsan -Wl,-rpath,$runtime" \
  -DCMAKE_SHARED_LINKER_FLAGS="-shared-libsan -Wl,-rpath,$runtime" >/dev/null
cmake --build "$build" -j"$jobs" --target tracepool_api_fuzzer tracepool_report_fuzzer
# libstdc++ precedes the shared ASan runtime in the executable's list (libFuzzer is C++); it defines
# no allocation function, so the order is harmless: tell ASan not to insist.
asan_options="verify_asan_link_order=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"

work="$(mktemp -d "${TMPDIR:-/tmp}/tracepool-fuzz-run.XXXXXX")"
artifacts="$PWD/$build/crashes"
mkdir -p "$artifacts"
status=0
summary=""
for kind in one many report; do
  mkdir -p "$work/$kind"
  fuzzer="$PWD/$build/tests/fuzz/tracepool_api_fuzzer"
  seeds=tests/fuzz/corpus
  max_len=2048
  label="one thread"
  [ "$kind" = one ] || label="2-4 threads"
  if [ "$kind" = report ]; then
    fuzzer="$PWD/$build/tests/fuzz/tracepool_report_fuzzer"
    seeds=tests/fuzz/report_corpus
    max_len=16384
    label="reports"
  fi
  cp "$seeds"/* "$work/$kind/"
  log="$work/$kind.log"
  echo "== fuzzing inputs run by $label for ${seconds}s"
  rc=0
  # TRACEPOOL_FUZZ_THREADS keeps the other kind of input out of this run.
  # TMPDIR: the reports the inputs write go under $work, which a crash keeps and success removes.
  TMPDIR="$work" TRACEPOOL_FUZZ_THREADS=$kind ASAN_OPTIONS="$asan_options" \
    "$fuzzer" -max_total_time="$seconds" -print_final_stats=1 -max_len="$max_len" -timeout=30 -rss_limit_mb=4096 \
    -artifact_prefix="$artifacts/$kind-" "$work/$kind" >"$log" 2>&1 || rc=$?
  grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)" "$log" || true
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  ops="$(sed -n 's/^api_fuzzer: \([0-9]*\) operations run$/\1/p' "$log" | tail -1)"
  if [ "$kind" = report ]; then ops="no"; fi  # inputs are texts, not C API operations
  grep -E "^api_fuzzer: bad inputs refused" "$log" | tail -1 || true
  done_line="$(grep -E "^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)" "$log" | tail -1 || true)"
  cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")"
  ft="$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$done_line")"
  corpus="$(ls "$work/$kind" | wc -l)"
  crashes=0
  if [ "$rc" -ne 0 ]; then
    status=1
    crashes=1
    tail -n 60 "$log"
    grep -E "Test unit written to|^artifact_prefix" "$log" || echo "fuzzer exited with $rc, no input saved (log: $log)"
  fi
  summary+="$(printf '%-11s %s executions (%s C API operations), cov %s, ft %s, corpus %s inputs, crashes %s' \
    "$label:" "${execs:-?}" "${ops:-?}" "${cov:-?}" "${ft:-?}" "$corpus" "$crashes")"$'\n'
done
echo "== fuzz summary (${seconds}s per run)"
printf '%s' "$summary"
if [ "$status" -eq 0 ]; then rm -rf "$work"; else echo "work files kept in $work"; fi
exit "$status"
