#!/usr/bin/env bash
# Runs a build (pip install -v of tracepool, or CMake) with its whole output in LOG and only its progress
# on stderr: the stage (configuring, compiling N of M, installing) on one line rewritten in place on a
# terminal, and a line at each quarter of the compiling elsewhere. A build that fails shows the end of its
# log and keeps its status. run_demo.sh builds with it: a first build is a minute or more of compiling,
# which `pip install -q` spent in silence.
#   examples/show_progress.sh LOG COMMAND [ARGS ...]
set -uo pipefail
log="$1"
shift
mkdir -p "$(dirname "$log")"
tty=0
[ -t 2 ] && tty=1

"$@" 2>&1 | tee "$log" | awk -v tty="$tty" '
  BEGIN { last = -1 }  # the first step is said, then each quarter
  function say(text) {
    if (tty) printf "\r  %s\033[K", text > "/dev/stderr"
    else print "  " text > "/dev/stderr"
    shown = 1
    fflush("/dev/stderr")
  }
  { sub(/^ +/, "") }  # pip -v indents what the build backend prints
  # scikit-build-core stages, then CMake and Ninja (or Make) progress.
  /^\*\*\* Configuring CMake|^-- The C(XX)? compiler identification/ { if (!configuring++) say("configuring (CMake)"); next }
  /^\[ *[0-9]+\/[0-9]+\]/ {
    match($0, /[0-9]+\/[0-9]+/)
    split(substr($0, RSTART, RLENGTH), n, "/")
    quarter = int(4 * n[1] / n[2])
    if (tty || quarter > last) say(sprintf("compiling: %d of %d steps", n[1], n[2]))
    last = quarter
    next
  }
  /^\*\*\* Installing project|^-- Installing: / { if (!installing++) say("installing"); next }
  END { if (tty && shown) printf "\n" > "/dev/stderr" }
'
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ]; then
  echo "the build failed (status $status); the end of its log, $log:" >&2
  tail -n 40 "$log" >&2
fi
exit "$status"
