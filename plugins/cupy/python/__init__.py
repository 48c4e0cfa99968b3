"""tracepool.cupy: tracepool as CuPy's allocator, the same process-wide pool as PyTorch's and Numba's.

    import tracepool.cupy
    tracepool.cupy.install()          # before the arrays you want tracked
    x = cupy.ones(1 << 20)            # tracepool memory, tagged "cupy", attributed to this line

install() hands CuPy C hooks (cupy.cuda.memory.CFunctionAllocator, from tracepool.cupy._hooks): each
allocation is one C call from CuPy's Cython code, no Python in between, on the stream CuPy's kernels
for it run on (its current stream, read through CuPy's own C function). Frees need no stream: the block remembers its own, and
tracepool reuses it on that stream at once and on other streams only after an event (as PyTorch's
allocator does). Out of memory raises tracepool.cupy.OutOfMemoryError, which is both CuPy's
cupy.cuda.memory.OutOfMemoryError and tracepool.OutOfMemoryError, with tracepool's message naming the
lines that hold memory.

CuPy's own pool objects stay as they were: cupy.get_default_memory_pool() then holds only what was
allocated before install() (install frees its cache, free_cached=False keeps it); its used_bytes(),
total_bytes() and free_all_blocks() say nothing about tracepool. Use tracepool.stats(),
tracepool.empty_cache() and the reports instead. Not supported: CuPy's per-thread default stream
(CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1), whose handle is the same number in every thread; install()
refuses it (and an allocation on cupy.cuda.Stream.ptds fails, saying why) rather than let two
threads' streams share blocks unsafely.
"""

from __future__ import annotations

import importlib.util
import os

import tracepool
from tracepool import _tracepool

__all__ = ["OutOfMemoryError", "install", "installed", "uninstall"]

_state: dict = {}  # "allocator", "previous", "hooks": while installed


def _cupy():
    if importlib.util.find_spec("cupy") is None:
        raise RuntimeError("tracepool.cupy: CuPy is not installed (pip install cupy-cuda13x, or the wheel for your CUDA)")
    import cupy

    return cupy


def _stream_capsule():
    """CuPy's C function that returns the current stream, or None where this CuPy has none we know."""
    for module in ("cupy_backends.cuda.stream", "cupy.cuda.stream"):
        try:
            capi = getattr(importlib.import_module(module), "__pyx_capi__", {})
        except ImportError:
            continue
        if "get_current_stream_ptr" in capi:
            return capi["get_current_stream_ptr"]
    return None


_oom = None  # the one class, made from the first CuPy seen


def _rebuild_oom(message, status):
    error = _oom_class()(message)
    error.status = status
    return error


def _oom_class():
    global _oom
    if _oom is None:
        base = _cupy().cuda.memory.OutOfMemoryError

        class OutOfMemoryError(base, tracepool.OutOfMemoryError):
            """Out of device memory under tracepool: CuPy's cupy.cuda.memory.OutOfMemoryError and
            tracepool.OutOfMemoryError at once; the message is tracepool's (who holds the memory)."""

            def __init__(self, message):  # CuPy's __init__ takes (size, total): not called
                MemoryError.__init__(self, message)

            def __reduce__(self):  # pickled by its message and status (multiprocessing, Dask)
                return _rebuild_oom, (str(self), getattr(self, "status", None))

        OutOfMemoryError.__module__ = __name__
        OutOfMemoryError.__qualname__ = "OutOfMemoryError"
        _oom = OutOfMemoryError
    return _oom


def __getattr__(name):
    # tracepool.cupy.OutOfMemoryError exists wherever CuPy does, installed or not, and is one class.
    if name == "OutOfMemoryError":
        return _oom_class()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def _install_hooks(capsule):
    """(malloc, free) of tracepool.cupy._hooks, set to call `capsule` for the stream (None: stream 0)."""
    from tracepool.cupy import _hooks

    classes = {code: cls for code, _, cls in _tracepool._statuses}
    return _hooks.install(capsule, _oom_class(), classes)


def install(conf: str | None = None, *, free_cached: bool = True) -> None:
    """Makes tracepool CuPy's allocator for every thread (cupy.cuda.set_allocator).

    ``conf`` configures tracepool's process-wide instance first (``TRACEPOOL_CONF`` syntax), as
    tracepool.configure; the instance is shared with PyTorch and Numba. ``free_cached`` gives CuPy's
    own pool's cache back to the device first. Raises RuntimeError (CuPy missing, or without the
    stream function tracepool needs; the per-thread default stream on) or tracepool.Error (a bad
    configuration). A second call does nothing.
    """
    cupy = _cupy()
    if os.environ.get("CUPY_CUDA_PER_THREAD_DEFAULT_STREAM", "0") not in ("", "0"):
        raise RuntimeError(
            "tracepool.cupy: CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1 is not supported: CuPy names every "
            "thread's default stream by the same handle, so tracepool could not keep threads' blocks apart; "
            "use explicit cupy.cuda.Stream objects, or leave the variable unset"
        )
    if _state:
        return
    capsule = _stream_capsule()
    if capsule is None:
        raise RuntimeError(
            "tracepool.cupy: CuPy %s offers no get_current_stream_ptr, so tracepool cannot allocate on CuPy's "
            "current stream; tracepool.cupy is tested with CuPy 14" % cupy.__version__
        )
    if conf is not None:
        tracepool.configure(conf)
    tracepool.stats(0)  # the process-wide instance now: a bad configuration fails here, not in a kernel
    malloc, free = _install_hooks(capsule)
    allocator = cupy.cuda.memory.CFunctionAllocator(0, malloc, free, _tracepool)
    previous = cupy.cuda.get_allocator()
    if free_cached:
        try:
            cupy.get_default_memory_pool().free_all_blocks()
        except Exception:  # noqa: BLE001 - no device yet: nothing is cached either
            pass
    cupy.cuda.set_allocator(allocator.malloc)
    _state.update(allocator=allocator, previous=previous, hooks=(malloc, free))


def installed() -> bool:
    """Whether CuPy allocates through tracepool now."""
    return bool(_state)


def uninstall() -> None:
    """Gives CuPy back the allocator it had before install(). Arrays made under tracepool stay valid and
    go back to tracepool when they die."""
    if not _state:
        return
    _cupy().cuda.set_allocator(_state["previous"])
    _state.clear()
