"""tracepool as PyTorch's CUDA allocator (plugins/torch/python/, installed as the subpackage tracepool.torch).

:func:`install` makes tracepool the allocator of every CUDA tensor (one call per tensor, so every
block carries the Python line that asked for it) and points ``torch.cuda``'s memory functions at
tracepool's numbers; call it first thing, before anything touches CUDA::

    import tracepool.torch
    tracepool.torch.install()
    import torch   # from here on as usual
    ...
    print(tracepool.report(format="text"))

or run the unchanged script with ``python -m tracepool run script.py``.

:func:`pool` is the scoped alternative (``torch.cuda.MemPool``), :func:`dump_snapshot` writes
tracepool's memory for pytorch.org/memory_viz. torch is imported only when these are called.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import os
import threading
import warnings
from typing import Any

from .. import _tracepool, configure, library_path
from . import _rebuild, _torch_lib, memory_history, memory_viz

__all__ = ["dump_snapshot", "install", "pool"]

_lock = threading.Lock()
# The installation: {"conf": ..., "allocator": the CUDAPluggableAllocator or None, "torch_lib": path of
# libtracepool_torch.so or None}. PyTorch itself keeps the installed allocator alive until exit
# (change_current_allocator stores it).
_installed: dict[str, Any] | None = None
_memory_fraction: dict[int, float] = {}  # what set_per_process_memory_fraction set, by device

_NOT_BEFORE_CUDA = (
    "PyTorch has already initialised CUDA, and it can swap its allocator only before that. Call "
    "tracepool.torch.install() first thing, before any torch.cuda call or CUDA tensor (even "
    "torch.cuda.get_device_name initialises CUDA), or run the unchanged script with "
    "`python -m tracepool run script.py`."
)


def _torch_lib_path() -> str | None:
    """libtracepool_torch.so (tracepool as a PyTorch CUDAAllocator), or None: the build makes it only
    where torch was importable, installs it next to this file and says so in _torch_lib.py."""
    if _torch_lib.FILE is None:
        return None
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), _torch_lib.FILE)


def _address(lib: ctypes.CDLL, name: str) -> int:
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


def install(conf: str | None = None) -> None:
    """Makes tracepool PyTorch's CUDA allocator, for good.

    ``conf`` configures tracepool's process-wide instance (``TRACEPOOL_CONF`` syntax, which it
    replaces); None keeps ``TRACEPOOL_CONF`` or the defaults. Must run before anything initialises
    CUDA. A second call is a no-op when its ``conf`` is None or the same, an error otherwise.

    Afterwards ``torch.cuda.memory_allocated``, ``memory_reserved``, their maxima,
    ``memory_stats``, ``memory_summary``, ``reset_peak_memory_stats``,
    ``reset_accumulated_memory_stats``, ``get_per_process_memory_fraction``, ``memory_snapshot``,
    ``_snapshot`` and ``_dump_snapshot`` report tracepool's memory; ``empty_cache``,
    ``set_per_process_memory_fraction`` and ``Tensor.record_stream`` reach tracepool; allocations
    made during ``backward()`` / ``torch.autograd.grad`` carry the Python frames of the line that
    called them (flagged borrowed).

    Where ``libtracepool_torch.so`` was built (torch importable at build time), tracepool is
    installed as a PyTorch CUDAAllocator class of its own: ``torch.cuda.graph``,
    ``make_graphed_callables``, ``torch.compile(mode="reduce-overhead")`` and ``torch.cuda.MemPool``
    get private pools from tracepool, OOM observers are told, and an allocation that does not fit
    raises ``torch.cuda.OutOfMemoryError`` with PyTorch's sentence followed by the lines that hold
    the most memory. Without it PyTorch's CUDAPluggableAllocator is used: no CUDA graphs or MemPool,
    and a failed allocation gives PyTorch a null pointer (tracepool prints the error on stderr).

    ``torch.cuda.memory._record_memory_history`` turns tracepool's history on and off, and
    ``_snapshot`` / ``_dump_snapshot`` then give PyTorch's format with it, for pytorch.org/memory_viz
    and every tool that starts there (:mod:`tracepool.torch.memory_history` says how its arguments
    are honoured; ``history:N`` in ``conf`` records from the start instead).

    There is no uninstall: PyTorch cannot swap its allocator back once it has one, and tensors
    already allocated must be freed by the allocator that made them.

    Raises RuntimeError if CUDA is already initialised or unavailable, or if tracepool's instance
    does not use the CUDA backend; :class:`tracepool.Error` for a bad ``conf``.
    """
    global _installed
    import torch

    with _lock:
        if _installed is not None:
            if conf is not None and conf != _installed["conf"]:
                raise RuntimeError("tracepool.torch.install: already installed with conf %r; cannot change it to %r"
                                   % (_installed["conf"], conf))
            return
        if torch.cuda.is_initialized():
            raise RuntimeError("tracepool.torch.install: " + _NOT_BEFORE_CUDA)
        if not torch.cuda.is_available():  # counts devices without initialising CUDA in torch
            raise RuntimeError("tracepool.torch.install: CUDA is not available to PyTorch here (no driver or device)")
        if conf is not None:
            configure(conf)
        backend = _tracepool.backend_name()  # creates the instance now: a bad TRACEPOOL_CONF fails here
        if backend != "cuda":
            raise RuntimeError("tracepool.torch.install: tracepool's instance uses the %r backend (TRACEPOOL_CONF?); "
                               "PyTorch needs device memory, backend cuda" % backend)

        torch_lib, why_not = _shim_for(torch.__version__)
        if why_not is not None:
            warnings.warn(why_not, RuntimeWarning, stacklevel=2)
        allocator = _install_allocator_class(torch_lib) if torch_lib is not None else _install_pluggable()
        _installed = {"conf": conf, "allocator": allocator, "torch_lib": torch_lib}
        _patch_memory_functions(torch, allocator_class=torch_lib is not None)
        _patch_backward(torch)
        _mark_boundaries(torch)
        if torch_lib is not None:
            _patch_graph_capture(torch)


def _without_shim() -> str:
    """What install() gives up without libtracepool_torch.so, and the command that builds it (_rebuild.py)."""
    return ("using PyTorch's CUDAPluggableAllocator instead: CUDA graphs (torch.cuda.graph, torch.compile "
            "mode='reduce-overhead'), torch.cuda.MemPool and OOM observers are unavailable, and an allocation that "
            "fails is not torch.cuda.OutOfMemoryError (tracepool still prints its report of what held the memory). "
            "To have them, build tracepool against this torch (a C++ compiler and the CUDA Toolkit are needed): "
            + _rebuild.command())


def _shim_for(torch_version: str) -> tuple[str | None, str | None]:
    """(libtracepool_torch.so's path, None) where it can serve this torch; else (None, why not), which
    install() warns of (plugins/torch/torch_allocator.cpp: it subclasses
    PyTorch's C++ allocator, so it is built against one torch and serves that one only)."""
    torch_lib = _torch_lib_path()
    if torch_lib is None:
        return None, ("tracepool.torch: this tracepool has no libtracepool_torch.so (a binary wheel, or torch "
                      "could not be imported when it was built); " + _without_shim())
    if _torch_lib.TORCH_VERSION != torch_version:
        return None, ("tracepool.torch: libtracepool_torch.so was built against torch %s, not this torch %s; %s"
                      % (_torch_lib.TORCH_VERSION, torch_version, _without_shim()))
    return torch_lib, None


def _install_allocator_class(path: str) -> None:
    """tracepool's CUDAAllocator subclass (plugins/torch/torch_allocator.cpp): CUDA graphs, MemPool,
    OOM observers and torch.cuda.OutOfMemoryError work as with PyTorch's own allocator."""
    lib = ctypes.CDLL(path)  # its dependency on libtracepool.so resolves to the one already loaded
    lib.tracepool_torch_install.restype = ctypes.c_int
    lib.tracepool_torch_install_error.restype = ctypes.c_char_p
    if lib.tracepool_torch_install() != 0:
        error = lib.tracepool_torch_install_error().decode("utf-8", "replace")
        if "already initialized" in error:
            raise RuntimeError("tracepool.torch.install: %s (PyTorch: %s)" % (_NOT_BEFORE_CUDA, error))
        raise RuntimeError("tracepool.torch.install: %s" % error)
    return None


def _install_pluggable() -> Any:
    """Without libtracepool_torch.so: PyTorch's CUDAPluggableAllocator over tracepool_torch_alloc.
    CUDA graphs, MemPool and OOM observers are then unavailable (the pluggable class refuses them)."""
    import torch

    lib = ctypes.CDLL(library_path())  # the file the extension uses: one allocator per process
    allocator = torch.cuda.memory.CUDAPluggableAllocator(library_path(), "tracepool_torch_alloc",
                                                         "tracepool_torch_free")
    hooks = allocator.allocator()  # a torch._C._CUDAPluggableAllocator
    hooks.set_reset_fn(_address(lib, "tracepool_torch_empty_cache"))
    hooks.set_memory_fraction_fn(_address(lib, "tracepool_torch_set_memory_fraction"))
    hooks.set_record_stream_fn(_address(lib, "tracepool_torch_record_stream"))
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as e:  # "Can't swap an already initialized allocator"
        raise RuntimeError("tracepool.torch.install: %s (PyTorch: %s)" % (_NOT_BEFORE_CUDA, e)) from e
    return allocator


def _device(device: int | None) -> int:
    import torch

    return torch.cuda.current_device() if device is None or device < 0 else int(device)


# Statistics the native allocator keeps and tracepool does not (it never refuses to split a block
# and keeps no oversize class); memory_summary() reads the oversize ones.
_NATIVE_ONLY_STATS = {
    "max_split_size": -1,
    "num_sync_all_streams": 0,
    "oversize_allocations": {"current": 0, "peak": 0, "allocated": 0, "freed": 0},
    "oversize_segments": {"current": 0, "peak": 0, "allocated": 0, "freed": 0},
}


def _memory_stats(device: int | None = None) -> dict[str, Any]:
    """torch._C._cuda_memoryStats: the nested statistics of memory_stats() and everything built on it."""
    stats = _tracepool.nested_stats(_device(device))
    for key, value in _NATIVE_ONLY_STATS.items():
        stats.setdefault(key, dict(value) if isinstance(value, dict) else value)
    return stats


def _reset_peak_stats(device: int | None = None) -> None:
    _tracepool.reset_peak_stats(_device(device))


def _reset_accumulated_stats(device: int | None = None) -> None:
    _tracepool.reset_accumulated_stats(_device(device))


def _memory_snapshot(pool_and_traces: tuple[int, int, bool] | None = None) -> dict[str, Any]:
    """torch._C._cuda_memorySnapshot: None from _snapshot(), (pool id, pool id, include_traces)
    from memory_snapshot() and MemPool.snapshot(). (0, 0) gives every segment, as PyTorch's own
    allocator does; a private pool's id only the segments of that pool."""
    snapshot = memory_history.shape(memory_viz.from_json(_tracepool.torch_snapshot_json()))
    if pool_and_traces is None:
        return snapshot
    pool = (int(pool_and_traces[0]), int(pool_and_traces[1]))
    if pool != (0, 0):
        snapshot = dict(snapshot, segments=[s for s in snapshot["segments"] if s["segment_pool_id"] == pool])
    return snapshot if pool_and_traces[2] else memory_viz.without_traces(snapshot)


def _get_memory_fraction(device: int | None = None) -> float:  # the pluggable fallback's
    return _memory_fraction.get(_device(device), 1.0)


def _patch_memory_functions(torch: Any, allocator_class: bool) -> None:
    """Points torch.cuda.memory's functions at tracepool where PyTorch's C++ side cannot. They look
    these torch._C functions up at every call (torch/cuda/memory.py), so replacing the attributes
    reroutes them.

    With tracepool's allocator class (``allocator_class``), memory_stats and everything built on it,
    the resets, the fraction, empty_cache and record_stream reach tracepool through PyTorch's own
    C++ calls; only the snapshot (memory_snapshot, _snapshot, _dump_snapshot, MemPool.snapshot),
    which the class cannot build in PyTorch's C++ types, the history calls (memory_history), and
    torch.accelerator's memory functions
    (which ask the allocator registered at load time, PyTorch's own) are routed here. With
    PyTorch's pluggable class, which refuses them all, the statistics and the fraction are too."""
    C = torch._C
    C._cuda_memorySnapshot = _memory_snapshot
    if allocator_class:
        memory_history.use_pytorch_function(C._cuda_record_memory_history)
    C._cuda_record_memory_history = memory_history.record
    C._cuda_record_memory_history_legacy = memory_history.record_legacy
    C._cuda_isHistoryEnabled = memory_history.enabled
    if not allocator_class:
        set_fraction = C._cuda_setMemoryFraction

        def _set_memory_fraction(fraction: float, device: int) -> None:
            set_fraction(fraction, device)  # -> tracepool_torch_set_memory_fraction
            _memory_fraction[_device(device)] = float(fraction)

        C._cuda_memoryStats = _memory_stats
        C._cuda_resetPeakMemoryStats = _reset_peak_stats
        C._cuda_resetAccumulatedMemoryStats = _reset_accumulated_stats
        C._cuda_getMemoryFraction = _get_memory_fraction
        C._cuda_setMemoryFraction = _set_memory_fraction
    # torch.accelerator's memory functions (torch/accelerator/memory.py) ask the allocator registered
    # for the device type, PyTorch's own, which never starts once another one is installed.
    for name, function in (("_accelerator_isAllocatorInitialized", torch.cuda.is_initialized),
                           ("_accelerator_emptyCache", C._cuda_emptyCache),
                           ("_accelerator_getDeviceStats", C._cuda_memoryStats),
                           ("_accelerator_resetPeakStats", C._cuda_resetPeakMemoryStats),
                           ("_accelerator_resetAccumulatedStats", C._cuda_resetAccumulatedMemoryStats)):
        if hasattr(C, name):
            setattr(C, name, function)


def _patch_graph_capture(torch: Any) -> None:
    """A failed capture ends its pool's route. PyTorch's CUDAGraph.capture_end raises before it
    calls endAllocateToPool when the capture was invalidated (and CUDAGraph.pool() then refuses to
    say which pool it was), which would leave tracepool's route open for good: allocations tried
    against a filter that reads the dead CUDAGraph, and tracepool's capture gate (no empty_cache, no
    cross-stream reuse) shut for the rest of the process. So capture_begin names the pool it captures
    into (a fresh torch.cuda.graph_pool_handle() where the caller gave none: the same private pool
    PyTorch would make), and capture_end ends that route when it raises. Ending twice is harmless."""
    graph_class = torch.cuda.graphs.CUDAGraph
    begin, end = graph_class.capture_begin, graph_class.capture_end
    if getattr(end, "__tracepool_wrapped__", None) is not None:
        return

    @functools.wraps(begin)
    def capture_begin(self: Any, pool: Any = None, capture_error_mode: str = "global") -> None:
        if pool is None:
            pool = torch.cuda.graph_pool_handle()
        self._tracepool_pool = (torch.cuda.current_device(), tuple(pool))
        begin(self, pool=pool, capture_error_mode=capture_error_mode)

    @functools.wraps(end)
    def capture_end(self: Any) -> None:
        try:
            end(self)
        except BaseException:
            device, pool = getattr(self, "_tracepool_pool", (None, None))
            if pool is not None:
                torch._C._cuda_endAllocateToPool(device, pool)
            raise

    capture_end.__tracepool_wrapped__ = end
    graph_class.capture_begin, graph_class.capture_end = capture_begin, capture_end


def _lend_frames(run_backward: Any) -> Any:
    """Wraps autograd's engine entry so that the allocations of its worker threads, which run no
    Python of their own, carry the Python frames of the thread that called backward (borrowed)."""
    if getattr(run_backward, "__tracepool_wrapped__", None) is not None:
        return run_backward

    @functools.wraps(run_backward)
    def run_backward_lending_frames(*args: Any, **kwargs: Any) -> Any:
        _tracepool._backward_begin(1)  # not this wrapper's frame: torch's and the caller's
        try:
            return run_backward(*args, **kwargs)
        finally:
            _tracepool._backward_end()

    run_backward_lending_frames.__tracepool_wrapped__ = run_backward
    return run_backward_lending_frames


def _patch_backward(torch: Any) -> None:
    # torch.autograd.backward and torch.autograd.grad (and so Tensor.backward) call the module
    # global torch.autograd._engine_run_backward, imported from torch.autograd.graph.
    for module in (torch.autograd, torch.autograd.graph):
        run_backward = getattr(module, "_engine_run_backward", None)
        if run_backward is not None:
            module._engine_run_backward = _lend_frames(run_backward)


def _mark_boundaries(torch: Any) -> None:
    """Automatic marks at a training loop's own boundaries, so that reports tell growing sites in a
    program that never calls tracepool.mark (Note [Growth without marks] in core/trace/tracer.h):
    after every optimizer step (PyTorch's global step hook), when a DataLoader's iterator ends an
    epoch, and when a module switches between train() and eval(). Each costs a call into tracepool
    that takes the mark only when the last automatic one is auto_mark_ms old (a clock read
    otherwise); none changes what the program sees: the hook returns None, StopIteration and
    train()'s result pass through."""
    auto_mark = _tracepool.auto_mark

    def after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        auto_mark("optimizer step")

    # torch.optim deletes its submodules' names from its namespace: import them by their full names.
    optimizer_module = importlib.import_module("torch.optim.optimizer")
    dataloader_module = importlib.import_module("torch.utils.data.dataloader")
    # Each hook is PyTorch's own API (register_optimizer_step_post_hook) or a class attribute that has
    # been there since PyTorch 1.x; one that is missing from some version is left out, not an error.
    register = getattr(optimizer_module, "register_optimizer_step_post_hook", None)
    if register is not None:
        register(after_step)

    iterator_class = getattr(dataloader_module, "_BaseDataLoaderIter", None)
    next_batch = getattr(iterator_class, "__next__", None)
    if next_batch is not None and getattr(next_batch, "__tracepool_wrapped__", None) is None:

        @functools.wraps(next_batch)
        def __next__(self: Any) -> Any:
            try:
                return next_batch(self)
            except StopIteration:
                auto_mark("epoch end")
                raise

        __next__.__tracepool_wrapped__ = next_batch
        iterator_class.__next__ = __next__

    module_class = torch.nn.Module
    train = module_class.train
    if getattr(train, "__tracepool_wrapped__", None) is None:
        switching = threading.local()  # train() recurses into every submodule: mark the outermost call

        @functools.wraps(train)
        def train_or_eval(self: Any, mode: bool = True) -> Any:
            if getattr(switching, "inside", False):
                return train(self, mode)
            was = getattr(self, "training", None)
            switching.inside = True
            try:
                return train(self, mode)
            finally:
                switching.inside = False
                if was is not None and was != bool(mode):
                    auto_mark("train()" if mode else "eval()")

        train_or_eval.__tracepool_wrapped__ = train
        module_class.train = train_or_eval


def pool(use_on_oom: bool = False) -> Any:
    """A ``torch.cuda.MemPool`` whose memory comes from tracepool, for scoped use::

        p = tracepool.torch.pool()
        with torch.cuda.use_mem_pool(p):
            kv_cache = torch.empty(...)

    PyTorch's own caching allocator stays in charge: it asks tracepool only for whole segments
    (2 MiB, 20 MiB, or the request rounded to 2 MiB) when the pool needs one, and returns them on
    ``empty_cache`` or when the pool dies. So tracepool's reports name the lines that grew the pool,
    not every tensor, and PyTorch's own memory tools (memory_stats, ``_record_memory_history``)
    keep working. Works after CUDA is initialised; not together with :func:`install`, after which
    a plain ``torch.cuda.MemPool()`` is tracepool's own private pool (every tensor attributed). Only
    the current thread's allocations go to the pool, as ``use_mem_pool`` documents.
    """
    import torch

    # The plain entry point: inside a pool PyTorch treats a null segment as its own out-of-memory
    # case (freeing its cache, retrying, raising OutOfMemoryError itself).
    allocator = torch.cuda.memory.CUDAPluggableAllocator(library_path(), "tracepool_torch_alloc",
                                                         "tracepool_torch_free")
    # The MemPool holds the C++ allocator by raw pointer, and only this Python object owns it. A
    # reference kept in a module would be dropped while the interpreter shuts down, maybe before the
    # pool is destroyed (which frees through the allocator): this one is never dropped.
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(allocator.allocator()))
    return torch.cuda.MemPool(allocator.allocator(), use_on_oom=use_on_oom)


def dump_snapshot(path: str | os.PathLike[str]) -> None:
    """Writes tracepool's memory now as a ``torch.cuda.memory._snapshot()`` pickle, for
    pytorch.org/memory_viz or ``python -m torch.cuda._memory_viz``.

    Segments and their blocks with state and the frames of each block's call site; since tracepool
    keeps no event history, the trace holds one ``alloc`` event per live block (so the timeline
    shows what is held and by which lines, oldest first). Pickle protocol 4, which the viewer reads
    (it rejects 5, Python 3.14's default). Does not need :func:`install` or torch.
    """
    memory_viz.dump(memory_viz.from_json(_tracepool.torch_snapshot_json()), path)
