"""The command line: `python -m tracepool run` runs a program with tracepool as its allocator and
reports where its memory went when it ends; `python -m tracepool report` renders a saved report;
`merge` shows the reports of several ranks as one, and `diff` what changed between two reports.

Errors of the command line itself (a missing script, a bad --conf, a file that is not a report)
are one line on stderr and exit status 2, never a traceback. A script's own failure is the
script's: its traceback is printed as Python would, the report follows, and its status is kept.
"""

import argparse
import errno
import json
import os
import re
import sys

from tracepool._escaping import escape
from tracepool._usage import UsageError

SCHEMA = "tracepool.report/1"
USAGE_ERROR = 2

_RUN_DESCRIPTION = """\
Run a Python program with tracepool as its allocator, then report which lines hold memory.

The program runs as __main__, as `python script.py args...` or `python -m module args...` would
run it. If PyTorch is installed, tracepool becomes PyTorch's CUDA allocator before the program
starts (if CUDA is unusable there, PyTorch is left alone and only tracepool's own Python API is
tracked); otherwise the program allocates through tracepool's Python API (tracepool.alloc). When
the program ends (normally, by sys.exit, or by an exception, whose traceback is printed first) the
report goes to stderr, or to --output (and, with --html, to an HTML page as well: one file to
open in a browser, with a flame graph, a timeline and the tables). The exit status is the program's.

The report lists the memory still held at the end by call site (the Python lines that allocated
it), flags sites that grew at every tracepool.mark() as GROWING, lists blocks that outlived marks,
and shows the cache: memory reserved but free, which nvidia-smi counts and no tensor holds.

With --intercept, it also lists what the program took from the CUDA driver outside tracepool's pool
(cudaMalloc and cuMemAlloc, NCCL's buffers, library workspaces, JAX's arena, pinned host memory), each
at its lines and tagged "outside the pool: ENTRY POINT", and the device's summary counts it."""

_RUN_EPILOG = """\
examples:
  python -m tracepool run train.py --epochs 3
  python -m tracepool run --conf sample_bytes:1MiB -o report.json -m mypackage.train
  python -m tracepool run --top 5 --no-torch examples/leaky_training.py
  python -m tracepool run --html report.html train.py
  python -m tracepool report report.json

  python -m tracepool run --intercept train.py
  python -m tracepool run --intercept -o report.json -- ./my_cuda_program --size 1024

Options come before the script (or -m module); everything after it is the program's.
--intercept -- PROGRAM runs any executable: each of its processes that uses the CUDA driver writes a
report at exit; the program's own is shown as a script's is."""

_REPORT_DESCRIPTION = """\
Render a report saved as JSON (by `run -o report.json`, tracepool.write_report("x.json") or
TRACEPOOL_REPORT=x.json) as text on stdout: the sites holding memory, largest first, with the
lines that allocated it; the memory of CUDA graphs and memory pools still held; retained blocks
and marks; the cached memory. --format html makes one self-contained page of it instead."""

_REPORT_EPILOG = """\
examples:
  python -m tracepool report report.json
  python -m tracepool report --top 3 report.json
  python -m tracepool report --format json report.json | less
  python -m tracepool report --format html -o report.html report.json"""


_MERGE_DESCRIPTION = """\
Show several reports as one: each call site across reports (ranks of one job, processes of one run),
with its live and cached bytes in each, which report holds the most and how far above the mean, and
where the report holding the most live memory differs from the one holding the least. Sites are
matched by their stacks and tags, not their ids (each process numbers its own). Reports name their
rank when a launcher set one (torchrun's RANK and WORLD_SIZE); `run -o report.json` under torchrun
writes report-rank0.json, report-rank1.json, ...; paths may also place {rank}, {pid} and {host}."""

_DIFF_EPILOG = """\
examples:
  python -m tracepool diff epoch1.json epoch5.json
  python -m tracepool diff --format json before.json after.json > change.json
  python -m tracepool diff -o change.html before.json after.json"""

_MERGE_EPILOG = """\
examples:
  torchrun --nproc-per-node 2 -m tracepool run -o report.json train.py
  python -m tracepool merge report-rank*.json
  python -m tracepool merge -o merged.json report-rank*.json
  python -m tracepool merge --format html -o ranks.html report-rank*.json"""


def _positive_int(text):
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError("expected a positive integer, got %r" % text)
    return n


# The most `report`, `merge` and `diff` read of a file unless --max-input-size says otherwise: 100k sites
# with stacks of 24 frames make a 0.5 GiB report, of 64 frames 1.5 GiB, of 96 (capture_depth's and
# python_depth's defaults together) 1.9 GiB; rendering one takes about 8 times its size in memory (0.5 GiB:
# 4.3 GB resident, 34 s).
MAX_INPUT_SIZE = "4GiB"

# The units of TRACEPOOL_CONF's byte sizes (parse_bytes in core/base/config.cpp).
_BYTE_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KiB": 1 << 10, "KB": 10**3, "M": 1 << 20, "MiB": 1 << 20, "MB": 10**6,
               "G": 1 << 30, "GiB": 1 << 30, "GB": 10**9, "T": 1 << 40, "TiB": 1 << 40, "TB": 10**12}


def _byte_size(text):
    """A byte size as TRACEPOOL_CONF writes one: 4096, 512MiB, 1.5GiB."""
    found = re.fullmatch(r"\s*(\d+\.?\d*|\.\d+)\s*([A-Za-z]*)\s*", text)
    scale = _BYTE_UNITS.get(found.group(2)) if found else None
    size = float(found.group(1)) * scale if scale is not None else float("nan")
    if not size.is_integer():  # nor nan, nor inf
        raise argparse.ArgumentTypeError("expected a byte size such as 4096, 512MiB or 8GiB (0: no cap), got %r" % text)
    return int(size)


def _version():
    import tracepool

    version = getattr(tracepool, "__version__", None)
    if version is None:
        from importlib import metadata

        try:
            version = metadata.version("tracepool")
        except metadata.PackageNotFoundError:
            version = "unknown"
    return "tracepool " + version


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m tracepool",
        description="tracepool: a caching GPU-memory allocator that says which lines of code hold memory.",
        epilog="Run `python -m tracepool COMMAND --help` for a command's options.\n\n" + _RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=_version(), help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="run a Python program with tracepool as its allocator and report where its memory went",
        description=_RUN_DESCRIPTION,
        epilog=_RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s [options] (script.py | -m module) [args ...]\n"
        "       %(prog)s --intercept [options] -- PROGRAM [args ...]",
    )
    run.add_argument(
        "--conf",
        metavar="TEXT",
        help="tracepool's configuration, key:value pairs separated by commas, as TRACEPOOL_CONF (which it "
        "replaces), e.g. backend:host,sample_bytes:1MiB or capture:native,capture_depth:64. "
        "docs/configuration.md lists the keys",
    )
    run.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the report to FILE instead of stderr: JSON if FILE ends in .json, HTML if in .html, else text",
    )
    run.add_argument(
        "--html",
        metavar="FILE",
        help="also write the report as one self-contained HTML page to FILE (a flame graph, a timeline and the "
        "tables; it loads nothing), besides the text on stderr or --output",
    )
    run.add_argument(
        "--format",
        choices=("text", "json", "html"),
        help="the report's format, whatever --output ends in (default: text on stderr, or by --output's extension)",
    )
    run.add_argument(
        "--top",
        type=_positive_int,
        default=10,
        metavar="N",
        help="sites shown in each section of the text report (default 10); JSON reports hold every site",
    )
    run.add_argument(
        "--no-holders",
        action="store_true",
        help="do not look for what holds each site's memory (by default the report follows the Python objects that "
        "expose its blocks to a global, a local, a closure or an autograd graph, within 2 s)",
    )
    run.add_argument(
        "--no-torch",
        action="store_true",
        help="do not make tracepool PyTorch's allocator, even if PyTorch is installed: only allocations "
        "through tracepool's own API are tracked",
    )
    run.add_argument(
        "--no-cupy",
        action="store_true",
        help="do not make tracepool CuPy's allocator (by default it becomes CuPy's when the program imports CuPy)",
    )
    run.add_argument(
        "--no-numba",
        action="store_true",
        help="do not make tracepool Numba's CUDA memory manager (by default it becomes it when the program imports "
        "numba.cuda, unless NUMBA_CUDA_MEMORY_MANAGER names another)",
    )
    run.add_argument(
        "--intercept",
        action="store_true",
        help="also record what the program takes from the CUDA driver outside tracepool's pool (cudaMalloc, NCCL, "
        "library workspaces, JAX's arena, pinned host memory), at the lines that asked, by loading tracepool's "
        "interposer with LD_PRELOAD; `--intercept -- PROGRAM ARGS` runs any program (a CUDA C++ binary, a shell "
        "script) this way",
    )
    run.add_argument("-m", dest="module", metavar="module", help="run a module as `python -m module` would")
    run.add_argument("script", nargs="?", help="the Python file to run (unless -m is given)")
    run.add_argument("args", nargs="*", help="the program's own arguments (sys.argv[1:])")

    report = commands.add_parser(
        "report",
        help="render a saved JSON report as text, or as an HTML page",
        description=_REPORT_DESCRIPTION,
        epilog=_REPORT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("file", metavar="FILE.json", help="a report saved as JSON (schema %s)" % SCHEMA)
    report.add_argument(
        "--top", type=_positive_int, default=10, metavar="N", help="sites shown in each section (default 10)"
    )
    report.add_argument(
        "--format",
        choices=("text", "json", "html"),
        help="text (default), the JSON as the library writes it (checked; fields it does not know are dropped), "
        "indented, or an HTML page; -o x.html picks HTML, -o x.json JSON",
    )
    report.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    merge = commands.add_parser(
        "merge",
        help="show the reports of several ranks or processes as one, with the imbalance between them",
        description=_MERGE_DESCRIPTION,
        epilog=_MERGE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    merge.add_argument("files", nargs="+", metavar="FILE.json", help="reports saved as JSON (schema %s)" % SCHEMA)
    diff = commands.add_parser(
        "diff",
        help="per-site change in live and cached bytes between two reports",
        description="Compare two reports (two steps, two commits, two configurations): the change in allocated, "
        "reserved and cached bytes, and each call site's change in live and cached bytes, largest first; "
        "sites are matched by their stacks and tags. --format html makes one self-contained page of it, "
        "with a view of each report.",
        epilog=_DIFF_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    diff.add_argument("before", metavar="BEFORE.json", help="the earlier report")
    diff.add_argument("after", metavar="AFTER.json", help="the later report")
    for command in (merge, diff):
        command.add_argument(
            "--top", type=_positive_int, default=10, metavar="N", help="sites shown in each section (default 10)"
        )
        command.add_argument(
            "--format",
            choices=("text", "json", "html"),
            help="text (default), JSON holding every site, or an HTML page; -o x.json picks JSON, -o x.html HTML"
            + ("; the page has a view of each report and of them all" if command is merge
               else "; the page has the changed sites and a view of each report"),
        )
        command.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    for command in (report, merge, diff):
        command.add_argument(
            "--max-input-size",
            type=_byte_size,
            default=MAX_INPUT_SIZE,  # argparse reads it with _byte_size
            metavar="BYTES",
            help="refuse a saved report larger than BYTES (default %s, twice a report of 100k sites; 0: no cap); "
            "an input without end, such as /dev/zero, is read no further" % MAX_INPUT_SIZE,
        )
    parser.commands = commands.choices  # each command's own parser: a mistake after `report` shows report's usage
    return parser


def render_saved_report(path, format, top, max_bytes):
    """The report saved at `path`, rendered by the library; UsageError if it cannot be read, is larger than
    `max_bytes` or is not one (the library's message names the file and the first problem)."""
    from tracepool import _compare

    try:
        return _compare.render_file(path, format, top, max_bytes)
    except _compare.ReportError as e:
        raise UsageError("report: %s" % e) from None


def _report(parser, argv):
    import tracepool

    options = parser.parse_args(argv)
    format = tracepool._format_for(options.output or "", options.format)
    _check_output(options.output, "report")
    if format == "json":
        text = json.dumps(json.loads(render_saved_report(options.file, "json", None, options.max_input_size)),
                          indent=2) + "\n"
    else:
        text = render_saved_report(options.file, format, options.top, options.max_input_size)
    return _emit(text, options.output, "report")


def _check_output(output, what):
    """UsageError where `output` could not be written (a missing folder, a directory): said before any
    report is read, as `run` says it before the program starts."""
    if output is None:
        return
    import tracepool

    try:
        tracepool.check_report_path(output)
    except tracepool.Error as e:
        raise UsageError("%s: -o: %s" % (what, e)) from None


def _emit(text, output, what):
    """`text` on stdout, or written to `output` where the library writes files. A path that fails only
    now (the disk filled, the folder went) is status 2 too: one line, as _check_output says it."""
    if output is None:
        return _print(text, what)
    import tracepool

    try:
        tracepool.write_file(output, text.encode("utf-8", "surrogateescape"))
    except tracepool.Error as e:
        raise UsageError("%s: -o: %s" % (what, e)) from None
    print("tracepool: %s written to %s" % (what, escape(output)), file=sys.stderr)
    return 0


def _print(text, what):
    """`text` on stdout. A failed write is status 2: one line (a full disk), or none when the reader left (a
    broken pipe: `| head -1`), as other tools end. Then stdout is pointed at /dev/null, so that Python's
    last flush at exit has nothing to fail on and adds no "Exception ignored" of its own."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
        return 0
    except OSError as e:
        if e.errno != errno.EPIPE:
            print("tracepool: %s: cannot write to stdout: %s" % (what, e.strerror or e), file=sys.stderr)
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except OSError:  # no descriptor left for /dev/null: the stream, and what it still holds, is dropped
        sys.stdout = None
    return USAGE_ERROR


def _compare(parser, command, argv):
    """`merge` and `diff` (`parser`: the command's): computed and rendered by the library
    (tracepool._compare), printed or written where reports go."""
    import tracepool
    from tracepool import _compare

    options = parser.parse_args(argv)
    format = tracepool._format_for(options.output or "", options.format)
    _check_output(options.output, command)
    try:
        if command == "merge":
            text = _compare.merge(options.files, format, options.top, options.max_input_size)
        else:
            text = _compare.diff(options.before, options.after, format, options.top, options.max_input_size)
    except _compare.ReportError as e:
        raise UsageError("%s: %s" % (command, e)) from None
    return _emit(text, options.output, command)


def main(argv=None):
    """The command line; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    if not argv:
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    command, rest = argv[0], argv[1:]
    try:
        if command == "run":
            from tracepool._run import run

            return run(parser.commands["run"], rest)
        if command == "report":
            return _report(parser.commands["report"], rest)
        if command in ("merge", "diff"):
            return _compare(parser.commands[command], command, rest)
        parser.parse_args(argv)  # --help, --version, or an error naming the unknown command
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    except UsageError as e:  # a file name or a report's text it quotes cannot fake lines or drive the terminal
        print("tracepool: %s" % escape(str(e)), file=sys.stderr)
        return USAGE_ERROR
    except SystemExit as e:  # argparse: --help (0) or a usage error (2), already printed
        return e.code if isinstance(e.code, int) else USAGE_ERROR
