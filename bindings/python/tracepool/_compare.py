"""Saved reports read for the command line: `python -m tracepool report` renders one, `merge` shows
several (one per rank, or per process) as one view, `diff` what changed between two. The library
computes and renders all three (core/report/compare.h): this module reads the files, bounded, and turns
the library's refusals into one line. A file that is not a report is refused with the reader's message.
"""

import os

from ._escaping import escape

_READ_CHUNK = 16 << 20  # what an input that does not say its size (a device, a FIFO) is read by


class ReportError(Exception):
    """A file that cannot be read or is not a report: one line, exit status 2."""


def shown(value):
    """A string from a report, or a file name, as a text or a message shows it (tracepool/_escaping.py)."""
    if isinstance(value, (bytes, os.PathLike)):
        value = os.fsdecode(value)
    return escape(value if isinstance(value, str) else str(value))


def read_saved(path, max_bytes):
    """The bytes of the file at `path`; ReportError if it cannot be read or holds more than `max_bytes`
    (0: no cap). A file that says its size is refused before it is read; anything else is read until one
    byte past the cap, so that an endless input (/dev/zero) is never read whole."""
    cap, chunks, size = max_bytes or float("inf"), [], 0
    try:
        with open(path, "rb", buffering=0) as f:
            known = os.fstat(f.fileno()).st_size  # 0 for a device, a FIFO or a file under /proc
            while max(known, size) <= cap:
                want = max(known - size + 1, _READ_CHUNK)  # a regular file in one read, its end in the next
                chunk = f.read(min(want, cap + 1 - size))
                if not chunk:
                    return b"".join(chunks)  # one chunk: that very object, not a copy
                chunks.append(chunk)
                size += len(chunk)
    except OSError as e:
        raise ReportError("cannot read %s: %s" % (shown(path), e.strerror or e)) from None
    except MemoryError:
        raise ReportError("cannot read %s: not enough memory for it" % shown(path)) from None
    raise ReportError("%s is larger than the %s cap on a saved report (--max-input-size BYTES sets it, 0 lifts it)"
                      % (shown(path), _human(max_bytes)))


def render_file(path, format, top, max_bytes):
    """The report saved at `path`, rendered by the library (`report`, `merge` and `diff` read files
    through it); ReportError if it cannot be read, is larger than `max_bytes` or is not a report (the
    library's message names the file and the first problem)."""
    import tracepool

    saved = read_saved(path, max_bytes)
    return _library(lambda: tracepool.render_report(saved, format, top, name=shown(path)), shown(path))


def _read_all(paths, max_bytes):
    """The saved reports, and their paths as the library names them (the path's bytes: in JSON as they
    are, in text and messages escaped)."""
    return [read_saved(path, max_bytes) for path in paths], [os.fsencode(path) for path in paths]


def _library(call, what):
    import tracepool

    try:
        return call()
    except tracepool.InvalidArgumentError as e:
        raise ReportError(str(e)) from None
    except MemoryError:  # the library's OutOfMemoryError too
        raise ReportError("cannot render %s: not enough memory for it" % what) from None


def merge(paths, format, top, max_bytes):
    """The reports at `paths` as one view (the library's tracepool_merge_reports), as 'text', 'json' (schema
    tracepool.merge/1) or 'html'; ReportError naming the first file that cannot be read or is not a report."""
    import tracepool

    saved, names = _read_all(paths, max_bytes)
    return _library(lambda: tracepool._tracepool.merge_reports(saved, names, format, top or 0),
                    "1 report" if len(paths) == 1 else "%d reports" % len(paths))


def diff(before_path, after_path, format, top, max_bytes):
    """Each call site's change from one saved report to another (tracepool_diff_reports), as 'text' or
    'json' (schema tracepool.diff/1); ReportError as merge's."""
    import tracepool

    (before, after), names = _read_all((before_path, after_path), max_bytes)
    return _library(lambda: tracepool._tracepool.diff_reports(before, after, names, format, top or 0),
                    "%s and %s" % (shown(before_path), shown(after_path)))


def _human(n):
    """A size in a message, as the library writes sizes."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return "%.2f %s" % (n / size, unit)
    return "%d B" % n
