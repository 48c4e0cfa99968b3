"""tracepool: a caching GPU-memory allocator that remembers which call stack asked for each block.

Everything here acts on the process-wide instance of ``libtracepool.so`` (the C API's
``tracepool_default()``), configured from ``TRACEPOOL_CONF`` or from :func:`configure` before its
first use. Importing the package registers CPython's frame provider, so every call site records the
Python frames (file, line, function) of the thread that allocated, even when that thread released the
GIL (PyTorch ops and ctypes calls do). PyTorch is not imported here; see ``tracepool.torch``.

Typical use::

    import tracepool
    with tracepool.tag("validation"):
        run_validation()
    tracepool.mark("epoch 1")
    print(tracepool.report(format="text"))
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

from . import _tracepool
from ._tracepool import Error, InvalidArgumentError, OutOfMemoryError, alloc, free, observe_alloc, observe_free

__all__ = [
    "Error",
    "InvalidArgumentError",
    "OutOfMemoryError",
    "alloc",
    "check_report_path",
    "configure",
    "empty_cache",
    "free",
    "leaks",
    "library_path",
    "mark",
    "observe_alloc",
    "observe_free",
    "render_report",
    "report",
    "report_path",
    "stats",
    "tag",
    "write_file",
    "write_report",
]

__version__ = "0.1.0"

# alloc and free are the extension's own functions, not Python wrappers, so that the innermost Python
# frame of their call sites is the caller's line.


def library_path() -> str:
    """The path of the ``libtracepool.so`` this process uses.

    Load it with ctypes (PyTorch's ``CUDAPluggableAllocator`` does) to reach the same process-wide
    allocator that this package uses: it is the one file the extension links to.
    """
    return _tracepool.library_path()


def configure(conf: str) -> None:
    """Configures the default instance before its first use (``TRACEPOOL_CONF`` syntax, which it replaces).

    ``conf`` is ``"key:value,key:value"``, for example ``"capture:all,python_depth:32"``. Raises
    :class:`InvalidArgumentError` for a bad text, or once the instance exists with another configuration.
    """
    _tracepool.configure(conf)


def _current_device() -> int:
    # Only a torch that is already imported and has initialised CUDA has a current device worth asking.
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return int(torch.cuda.current_device())
    return 0


def stats(device: int | None = None) -> dict[str, int]:
    """Statistics of one device, with the flat keys of ``torch.cuda.memory_stats()``.

    ``allocated_bytes.all.current``, ``reserved_bytes.large_pool.peak``, ... for allocation, segment,
    active, inactive_split and their ``_bytes``, and requested_bytes; plus ``num_alloc_retries``,
    ``num_ooms``, ``num_device_alloc``, ``num_device_free``, and tracepool's ``num_invalid_frees`` and
    ``limit_bytes``. ``device`` None means torch's current device if torch has initialised CUDA,
    else device 0. Creates the default instance if it does not exist yet.
    """
    return _tracepool.stats(_current_device() if device is None else device)


def empty_cache() -> None:
    """Gives every fully free cached segment of every device back to the device."""
    _tracepool.empty_cache(-1)


def mark(label: str) -> None:
    """Records a named point in time, an epoch boundary say.

    Reports give each call site's live bytes at every mark, flag sites whose live bytes keep growing
    across marks, and list blocks that outlived marks.
    """
    _tracepool.mark(label)


class tag(contextlib.ContextDecorator):
    """Tags the calling thread's allocations: every call site captured inside carries ``label``.

    A context manager (``with tracepool.tag("eval"): ...``) and a decorator (``@tracepool.tag("eval")``).
    Tags nest, are per thread, and appear in reports outermost first.
    """

    def __init__(self, label: str) -> None:
        self.label = label

    def __enter__(self) -> tag:
        _tracepool.tag_push(self.label)
        return self

    def __exit__(self, *exc: object) -> None:
        _tracepool.tag_pop()


# How long a report may spend naming what holds memory (Note [Who holds it] in _holders.py).
HOLDER_BUDGET_S = 2.0


def report(format: str = "json", reason: str | None = None, top: int | None = None, holders: bool = True) -> str:
    """The report of the memory held now: ``"json"`` (docs/report-schema.md), ``"text"`` or ``"html"``
    (one self-contained page that draws it in a browser).

    ``reason`` is recorded in it (None: ``"demand"``; ``"exit"`` calls what is held leaked); ``top``
    is how many sites each section of the text lists (None: 10; JSON holds every site). With
    ``holders``, each site says what keeps its blocks alive where Python can tell (a tensor or an
    object with ``__cuda_array_interface__`` or DLPack that exposes them, followed to a global, a
    local, a closure cell or the autograd graph of a tensor), found within HOLDER_BUDGET_S seconds.
    """
    return _tracepool.report(format, reason, 0 if top is None else top, False, _holder_answer() if holders else None)


def _holder_answer(program_globals: dict[str, Any] | None = None, program_name: str | None = None) -> Any:
    """The holder search (Note [Who holds it] in _holders.py) as the library's report calls it
    (tracepool_holders_fn): the leaks' live blocks, (address, bytes, leak index), in; what holds them
    out, as JSON. The library calls it once, after the memory is collected and holding no lock of its
    own; the search runs on a thread of its own that this one waits for within the budget (Note
    [Bounded search]). Importing the search fails here, before any report is made."""
    find_holders = _holder_search()

    def answer(blocks: list[tuple[int, int, int]]) -> str:
        found = find_holders(blocks, program_globals, program_name, HOLDER_BUDGET_S)
        return json.dumps({"held_by": {str(index): held for index, held in found["held_by"].items()},
                           "holder_search": {"complete": bool(found["complete"]), "objects": int(found["objects"]),
                                             "exposing": int(found["exposing"]), "seconds": float(found["seconds"]),
                                             "note": found["note"] or ""}})

    return answer


def _holder_search() -> Any:
    """_holders.find_holders, imported by the first report that names holders (it loads ctypes, which a
    program that never asks for one need not pay for). An import opens files: with every descriptor taken
    (or no memory left) it fails, and says so as a tracepool.Error, not as an OSError from importlib."""
    try:
        from ._holders import find_holders
    except (ImportError, OSError, MemoryError) as e:
        error = Error("the holder search cannot be loaded (%s: %s); holders=False makes the report without it"
                      % (type(e).__name__, e))
        error.status = -9  # TRACEPOOL_ERR_INTERNAL, as the library's own errors carry theirs
        raise error from e
    return find_holders


def _render(saved: str, format: str, top: int | None) -> str:
    """A report the library made as JSON, rendered as `format` by the library."""
    return _tracepool.render_report(saved.encode(), format, 0 if top is None else top, None)


def _format_for(path: str | bytes | os.PathLike[str] | os.PathLike[bytes], format: str | None) -> str:
    """`format`, or the one the library picks for `path` (tracepool_write_report): by its extension."""
    return _tracepool.report_format(os.fsencode(path), format)


def write_report(
    path: str | bytes | os.PathLike[str] | os.PathLike[bytes],
    format: str | None = None,
    reason: str | None = None,
    top: int | None = None,
    holders: bool = True,
) -> None:
    """Writes the report to ``path``.

    A new path or a regular file is replaced atomically (no reader sees half a report, no temporary
    file is left behind); ``"stderr"``, ``/dev/stdout``, ``/dev/stderr`` and ``/dev/fd/N`` are written
    straight into that descriptor, a character device or a FIFO in place; anything else (a directory,
    a socket, a symbolic link) raises :class:`InvalidArgumentError` and is left alone. ``format`` is
    ``"json"``, ``"text"`` or ``"html"``; None picks JSON when the path ends in ``.json``, HTML in
    ``.html`` or ``.htm``. ``reason``, ``top`` and
    ``holders`` as :func:`report`'s. The path may hold ``{rank}``, ``{pid}`` and ``{host}``; see
    :func:`report_path`. Raises :class:`Error` when the report cannot be made or written (every file
    descriptor taken, say), :class:`InvalidArgumentError` for a path it refuses or cannot write.
    """
    # bytes: any file name the OS allows; the library expands {rank}, {pid} and {host} (Note [Ranks])
    _tracepool.write_report(os.fsencode(path), format, reason, 0 if top is None else top,
                            _holder_answer() if holders else None)


def report_path(path: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> str:
    """Where a report written to ``path`` now goes.

    ``{rank}`` (the launcher's rank, 0 when none), ``{pid}`` and ``{host}`` are replaced. Under a
    launcher of more than one rank (torchrun's ``RANK`` and ``WORLD_SIZE``, Open MPI, MPICH, Slurm), a
    path that names neither ``{rank}`` nor ``{pid}`` gets ``-rank<N>`` before its extension, so that
    no rank's report replaces another's: ``report.json`` becomes ``report-rank1.json``. What is
    written in place stays as it is: ``"stderr"``, ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N`` and
    existing character devices and FIFOs (a file under ``/dev/shm`` is a file). Each placeholder's value
    is made a plain file-name component. :func:`write_report`, ``TRACEPOOL_REPORT`` and ``python -m
    tracepool run -o`` all write there.
    """
    return os.fsdecode(_tracepool.report_path(os.fsencode(path)))


def check_report_path(path: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> None:
    """Raises :class:`InvalidArgumentError` saying why a report could not be written at ``path`` now
    (at this rank's path, :func:`report_path`): a missing or read-only folder, a directory, a symbolic
    link, a name too long. Writes nothing. A FIFO without a reader yet is fine. ``python -m tracepool
    run`` checks its ``-o``, ``--html`` and ``TRACEPOOL_REPORT`` paths so before the program starts.
    """
    _tracepool.check_report_path(os.fsencode(path))


def _write_file_or_fallback(path: str | bytes | os.PathLike[str] | os.PathLike[bytes], data: bytes) -> tuple[str, str]:
    """:func:`write_file`, and where that fails, a new file in the temporary folder: (where it went, why
    not at ``path``, or ``""``). Raises :class:`Error` where neither could be written."""
    where, why = _tracepool.write_file_or_fallback(os.fsencode(path), bytes(data))
    return os.fsdecode(where), why.decode("utf-8", "surrogateescape")


def render_report(
    saved: str | bytes, format: str = "text", top: int | None = None, name: str | None = None
) -> str:
    """Renders a report saved as JSON (by :func:`write_report`, ``TRACEPOOL_REPORT`` or ``python -m
    tracepool run -o x.json``) as ``"text"``, exactly as the library rendered it live, as the
    library's ``"json"``, or as an ``"html"`` page.

    Raises :class:`InvalidArgumentError` for a text that is not a report of schema
    ``tracepool.report/1``, naming its first problem by JSON path (``leaks[3].bytes must be a
    non-negative integer, not -1``); ``name`` (a file name, say) is what the message calls the text.
    """
    data = saved.encode("utf-8", "surrogatepass") if isinstance(saved, str) else bytes(saved)
    return _tracepool.render_report(data, format, 0 if top is None else top, name)


def write_file(path: str | bytes | os.PathLike[str] | os.PathLike[bytes], data: bytes) -> None:
    """Writes ``data`` to ``path`` where and as :func:`write_report` writes a report.

    Raises :class:`Error` (:class:`InvalidArgumentError` for a path it refuses or cannot write).
    """
    _tracepool.write_file(os.fsencode(path), bytes(data))


def leaks() -> list[dict[str, Any]]:
    """The live memory now, by call site: the ``"leaks"`` list of the JSON report, largest first.

    Each site has ``bytes``, ``blocks``, ``tags``, ``growing`` and ``frames`` (innermost first; Python
    frames have ``"kind": "python"``), as docs/report-schema.md describes.
    """
    sites: list[dict[str, Any]] = json.loads(report("json"))["leaks"]
    return sites
