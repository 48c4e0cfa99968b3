"""`run --intercept`: the interposer (libtracepool_intercept.so, Note [Interposer] in
plugins/intercept/intercept.cpp) loaded into the program with LD_PRELOAD, so that what it takes from the
CUDA driver outside tracepool's pool (cudaMalloc, NCCL, library workspaces, JAX's arena, any CUDA program)
is in its report, at the lines that asked.

- A Python program: `run` starts again under the interposer (LD_PRELOAD is read only when a process
  starts: os.execve of the same command, same pid) and goes on as it would without --intercept.
- Any other program (after `--`): started under it, each process that uses the driver writing its report
  at exit (TRACEPOOL_REPORT with {pid}); `run` then shows the program's own, and says where the others are.
"""

import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from tracepool._usage import UsageError

LIBRARY = "libtracepool_intercept.so"
_RESTARTED = "TRACEPOOL_INTERCEPT_RESTARTED"  # set across run's own restart, against a loop


def library_path():
    """The interposer next to the libtracepool.so this process uses (the wheel installs them together)."""
    import tracepool

    return os.path.join(os.path.dirname(tracepool.library_path()), LIBRARY)


def loaded():
    """Whether the interposer is loaded in this process."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return any(line.rstrip().endswith("/" + LIBRARY) for line in maps)
    except OSError:
        return False


def environment(extra):
    """os.environ with the interposer first in LD_PRELOAD, and `extra`."""
    library = library_path()
    if not os.path.isfile(library):
        raise UsageError("run --intercept: %s is missing (tracepool was built without it)" % library)
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(p for p in (library, env.get("LD_PRELOAD", "")) if p)
    env.update(extra)
    return env


def restart_under_interposer(argv):
    """Returns once the interposer is loaded here; otherwise replaces this process with `python -m tracepool
    run ARGV` under it (the same pid, so launchers and signals see no difference)."""
    if loaded():
        os.environ.pop(_RESTARTED, None)  # not the program's
        return
    if os.environ.get(_RESTARTED):
        raise UsageError("run --intercept: the dynamic loader did not load %s from LD_PRELOAD (it ignores "
                             "LD_PRELOAD for set-user-ID programs, and says why on stderr otherwise)" % library_path())
    env = environment({_RESTARTED: "1"})
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.execve(sys.executable, [sys.executable, "-m", "tracepool", "run"] + list(argv), env)


def run_program(program, conf, show):
    """Runs `program` (argv) under the interposer and waits for it, passing SIGTERM and SIGINT on to it.
    `show(data)` renders the report of the program's own process (the library's JSON) and returns 0 or 1.
    Returns the exit status: the program's (128 + N when signal N ended it), or 1 where it succeeded
    and its report could not be written where asked."""
    folder = tempfile.mkdtemp(prefix="tracepool-run-")
    extra = {"TRACEPOOL_REPORT": os.path.join(folder, "report-{pid}.json")}
    if conf is not None:
        extra["TRACEPOOL_CONF"] = conf
    try:
        child = subprocess.Popen(program, env=environment(extra))
    except OSError as e:
        shutil.rmtree(folder, ignore_errors=True)
        raise UsageError("run: cannot start %s: %s" % (program[0], e.strerror or e)) from None
    # The terminal's Ctrl-C reaches the program by itself (same process group); a SIGTERM sent to `run`
    # alone is passed on. Either way `run` waits for the program's end and its report.
    forward = lambda signum, frame: child.send_signal(signum)  # noqa: E731
    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        status = child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if status < 0:
        status = 128 - status
    reports = sorted(glob.glob(os.path.join(folder, "report-*.json")))
    own = os.path.join(folder, "report-%d.json" % child.pid)
    main = own if own in reports else (reports[0] if len(reports) == 1 else None)
    written = 0
    if main is not None:
        with open(main, encoding="utf-8", errors="surrogateescape") as f:
            written = show(f.read())
        reports.remove(main)
        os.unlink(main)
    elif not reports:
        print("tracepool: %s made no allocation through the CUDA driver that tracepool saw, and wrote no report"
              % program[0], file=sys.stderr)
    if reports:
        print("tracepool: %d other process%s of the program wrote %s too, kept in %s (python -m tracepool merge %s "
              "shows them as one)" % (len(reports), "" if len(reports) == 1 else "es", "reports" if len(reports) > 1
                                      else "a report", folder, os.path.join(folder, "*.json")), file=sys.stderr)
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return status if status != 0 else written
