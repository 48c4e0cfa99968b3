"""`python -m tracepool run`: the program runs as __main__ with tracepool as the allocator of every runtime it
uses (PyTorch, CuPy, Numba), then the report of what it still holds goes to stderr or --output (and --html).
With --intercept the interposer is loaded too (_intercept.py). The command line itself is _cli.py's.
"""

import importlib.util
import os
import runpy
import signal
import sys
import traceback

from tracepool._usage import UsageError

# Options of `run` that take a value; they and the flags come before the program.
_RUN_VALUE_OPTIONS = {"--conf", "-o", "--output", "--html", "--format", "--top"}


def _split_run_argv(argv):
    """(tracepool's options, program argv). The program starts at the first argument that is not
    an option (the script) or after -m's module, so the program's options are never ours."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return argv[:i], argv[i + 1 :]
        if arg == "-m":
            return argv[: i + 2], argv[i + 2 :]
        if arg.startswith("-m") and not arg.startswith("--"):
            return argv[: i + 1], argv[i + 1 :]
        if not arg.startswith("-") or arg == "-":
            return argv[:i], argv[i:]
        i += 2 if arg in _RUN_VALUE_OPTIONS else 1
    return argv, []


def _install(options):
    """Makes tracepool the allocator of every runtime the program may use: PyTorch first (before anything
    initialises CUDA), then CuPy when the program imports it, and Numba through its environment
    variable. One process-wide instance serves them all. Returns None, or raises UsageError."""
    import tracepool

    conf = options.conf
    torch_done = False
    if not options.no_torch and importlib.util.find_spec("torch") is not None:
        import tracepool.torch

        try:
            tracepool.torch.install(conf)
            torch_done = True
        except tracepool.Error as e:
            raise UsageError("--conf: %s" % e) from None
        except RuntimeError as e:
            print(
                "tracepool: PyTorch left with its own allocator (%s); tracking tracepool's own API only" % e,
                file=sys.stderr,
            )
    if not torch_done:
        try:
            if conf is not None:
                tracepool.configure(conf)
            tracepool.stats()  # creates the default instance now, so a bad configuration fails here
        except tracepool.Error as e:
            raise UsageError("--conf: %s" % e if conf is not None else str(e)) from None
    from tracepool._after_import import after_import

    if not options.no_cupy and importlib.util.find_spec("cupy") is not None:
        after_import("cupy", _install_cupy)
    if not options.no_numba and importlib.util.find_spec("numba") is not None:
        chosen = os.environ.get("NUMBA_CUDA_MEMORY_MANAGER", "default")
        if chosen not in ("default", "tracepool.numba"):
            print("tracepool: Numba keeps NUMBA_CUDA_MEMORY_MANAGER=%s" % chosen, file=sys.stderr)
        else:
            after_import("numba.cuda", _install_numba)


# Run inside the program's `import cupy` / `import numba.cuda`: a failure must not fail that import.
def _install_cupy(cupy):
    import tracepool.cupy

    try:
        tracepool.cupy.install()
    except Exception as e:  # noqa: BLE001 - the program goes on with CuPy's own pool, and is told
        print("tracepool: CuPy left with its own allocator (%s: %s)" % (type(e).__name__, e), file=sys.stderr)


def _install_numba(numba_cuda):
    try:
        import tracepool.numba

        tracepool.numba.install()
    except Exception as e:  # noqa: BLE001 - the program goes on with Numba's own manager, and is told
        print("tracepool: Numba left with its own memory manager (%s: %s)" % (type(e).__name__, e), file=sys.stderr)


def _program_traceback(exc):
    """The traceback Python would print: the program's frames, without runpy's or ours."""
    tb = exc.__traceback__
    ours = (os.path.abspath(__file__), os.path.abspath(runpy.__file__))
    while tb is not None and (
        os.path.abspath(tb.tb_frame.f_code.co_filename) in ours or tb.tb_frame.f_code.co_filename.startswith("<frozen ")
    ):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _exit_status(exc):
    """What the interpreter exits with for a SystemExit (printing its message as Python does)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


class _Terminated(BaseException):
    """SIGTERM, raised in the program as Ctrl-C raises KeyboardInterrupt, so that it unwinds (its finally
    blocks run), its report is written, and `run` then ends by the signal as the program would have."""


def _raise_terminated(signum, frame):
    raise _Terminated()


def _run_program(options, program_args):
    """Runs the program as __main__. Returns (exit status, what keeps its objects alive): the
    program's globals, or its exception (whose traceback holds its frames), so that what it still
    held at its end is still held when the report is made, as at a real exit."""
    if options.module is not None:
        sys.argv = [options.module] + program_args  # runpy replaces [0] with the module's file
        sys.path[0] = os.getcwd()
        run = lambda: runpy.run_module(options.module, run_name="__main__", alter_sys=True)  # noqa: E731
    else:
        script = os.path.abspath(options.script)  # as Python names its main script since 3.9
        sys.argv = [script] + program_args
        sys.path[0] = os.path.dirname(script)
        run = lambda: runpy.run_path(script, run_name="__main__")  # noqa: E731
    try:
        return 0, run()
    except SystemExit as e:
        return _exit_status(e), e
    except _Terminated as e:
        print("tracepool: SIGTERM: the program stopped; its report follows, then `run` ends by the signal",
              file=sys.stderr)
        return 128 + signal.SIGTERM, e
    except BaseException as e:  # the program's failure: reported as Python reports it
        sys.stderr.write(_program_traceback(e))
        return (130 if isinstance(e, KeyboardInterrupt) else 1), e


def _report_at_end(options, keep_alive=None):
    """The library's report of what the program still holds (reason "exit"), to stderr or --output,
    and to --html. `keep_alive` is what _run_program returned: the program's globals name its holders.
    The report is made once and rendered in each format asked for."""
    import tracepool

    program_globals = keep_alive if isinstance(keep_alive, dict) else None
    program_name = options.module if options.module is not None else os.path.basename(options.script)

    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass  # the program closed or broke its stdout: the report goes to stderr or a file anyway
    holders = None if options.no_holders else tracepool._holder_answer(program_globals, program_name)
    return _show_report(options, tracepool._tracepool.report("json", "exit", 0, False, holders))


def _show_report(options, data):
    """The report `data` (the library's JSON) to stderr or --output, and to --html; 1 where one did not go where
    asked."""
    import tracepool

    status = 0
    if options.output is None:
        sys.stderr.write(tracepool._render(data, options.format or "text", options.top))
        sys.stderr.flush()
    else:
        status |= _write_rendered(data, options.output, tracepool._format_for(options.output, options.format), options.top)
    if options.html is not None:
        status |= _write_rendered(data, options.html, "html", options.top)
    return status


def _write_rendered(data, path, format, top):
    """Writes the report `data` (the library's JSON) rendered as `format` where and as the library writes its reports
    (atomically, or straight into a device or a FIFO), at this rank's path (Note [Ranks]). Never lost
    (Note [When a report cannot be written]): where the path fails, it goes to the temporary folder, and
    where that fails too, as text to stderr. 1 when it did not go to `path`."""
    import tracepool

    where = tracepool.report_path(path)
    try:
        written, why = tracepool._write_file_or_fallback(
            where, tracepool._render(data, format, top).encode("utf-8", "surrogatepass"))
    except tracepool.Error as e:
        print("tracepool: the report could be written neither to %s nor to the temporary folder (%s); here it is:"
              % (where, e), file=sys.stderr)
        sys.stderr.write(tracepool._render(data, "text", top))
        return 1
    if why:
        print("tracepool: %s; the report went to %s instead%s" % (why, written, _how_to_open(written, format)),
              file=sys.stderr)
        return 1
    print("tracepool: report written to %s%s" % (written, _how_to_open(written, format)), file=sys.stderr)
    return 0


def _how_to_open(path, format):
    """"; " and the command that shows a report written as `format` at `path`, for the line that says where it went:
    this Python's, and the absolute path (the program may have changed folders); nothing for what is not a regular
    file itself (stderr, a device, a FIFO, /dev/stdout linked to a file)."""
    import pathlib
    import shlex
    import stat

    try:
        if path == "stderr" or not stat.S_ISREG(os.lstat(path).st_mode):
            return ""
    except (OSError, TypeError, ValueError):
        return ""
    where = os.path.abspath(path)
    if format == "html":
        return "; open it in a browser: %s" % pathlib.Path(where).as_uri()
    if format == "json":
        return "; read it with: %s -m tracepool report %s" % (shlex.quote(sys.executable), shlex.quote(where))
    return "; read it with: less %s" % shlex.quote(where)


def _check_outputs(options):
    """Every path the report will go to, checked before the program starts, so that a path that cannot be
    written is said now, not after hours of training. UsageError names the first that fails."""
    import tracepool

    for what, path in (("-o", options.output), ("--html", options.html),
                       ("TRACEPOOL_REPORT", os.environ.get("TRACEPOOL_REPORT"))):
        if path:
            try:
                tracepool.check_report_path(path)
            except tracepool.Error as e:
                raise UsageError("run: %s: %s" % (what, e)) from None


def _end_by_sigterm():
    """Ends `run` as SIGTERM would have ended the program, after its reports (the library's
    TRACEPOOL_REPORT one too: dying by a signal runs no exit handler)."""
    import tracepool

    tracepool._tracepool.write_exit_report()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _run_intercepted_program(options, program):
    """`run --intercept -- PROGRAM ARGS`: any program under the interposer, its report shown as a script's."""
    from tracepool import _intercept

    if options.module is not None:
        raise UsageError("run --intercept: -m runs a Python module and `--` a program: not both")
    if not program:
        raise UsageError("run --intercept --: name the program to run")
    _check_outputs(options)
    return _intercept.run_program(program, options.conf, lambda data: _show_report(options, data))


def run(parser, argv):
    """`run`'s arguments after the command's name (`parser`: run's own); returns the exit status."""
    ours, program_args = _split_run_argv(argv)
    options = parser.parse_args(ours)  # never holds the program: script and args are for --help
    if options.intercept and len(ours) < len(argv) and argv[len(ours)] == "--":
        return _run_intercepted_program(options, program_args)
    if options.module is None:
        if not program_args:
            raise UsageError("run: name a script to run, or -m module")
        options.script, program_args = program_args[0], program_args[1:]
    if options.module is None and os.path.isdir(options.script):
        raise UsageError("run: %s is a directory, not a Python file: name the script in it, or run a package with -m"
                         % options.script)
    if options.module is None and not os.path.isfile(options.script):
        raise UsageError("run: no such file: %s" % options.script)
    _check_outputs(options)
    if options.intercept:
        from tracepool import _intercept

        _intercept.restart_under_interposer(argv)  # returns once it is loaded here
    _install(options)
    if options.module is not None:  # after _install: finding a submodule imports its packages
        try:
            found = importlib.util.find_spec(options.module)
        except (ImportError, ValueError) as e:
            raise UsageError("run: cannot run module %s: %s" % (options.module, e)) from None
        if found is None:
            raise UsageError("run: no module named %s" % options.module)

    # SIGTERM (launchers, `kill`) stops the program as Ctrl-C does, where nobody set it to anything else.
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_terminated)
    status, keep_alive = _run_program(options, program_args)
    terminated = [isinstance(keep_alive, _Terminated)]
    if signal.getsignal(signal.SIGTERM) == _raise_terminated:  # one during the report is kept for after it
        signal.signal(signal.SIGTERM, lambda signum, frame: terminated.append(True))
    if _report_at_end(options, keep_alive) != 0 and status == 0:
        status = 1
    del keep_alive
    if any(terminated):
        _end_by_sigterm()
    return status
