"""tracepool.numba: tracepool as Numba's CUDA memory manager (Numba's External Memory Management).

    NUMBA_CUDA_MEMORY_MANAGER=tracepool.numba python train.py
    # or, before Numba creates its first context:
    import tracepool.numba; tracepool.numba.install()

Device arrays then come from tracepool's process-wide pool, the one PyTorch and CuPy use, tagged
"numba" and attributed to the Python line that made them. Numba's EMM passes no stream, on allocation
or free: an allocation is made on stream 0 (the legacy default stream), and a free is fenced by an
event recorded on the legacy default stream, which completes only after the work already queued on
every blocking stream (Numba's own streams are blocking). So a block is reused only once no kernel
queued before its free on a blocking stream can still touch it. Work on a non-blocking stream (one of
PyTorch's side streams, a cupy.cuda.Stream(non_blocking=True)) is not ordered with the legacy stream:
a Numba array used there must be synchronised before it dies, as with Numba's own manager. Each free
is one event record on the legacy stream, which orders it after every blocking stream's queued work. Pinned and mapped host memory are Numba's
own (HostOnlyCUDAMemoryManager). IPC handles come from the segment that holds the block (Numba's
GetIpcHandleMixin: cuMemGetAddressRange, then an offset). numba.cuda.close() resets the context that
tracepool's CUDA memory lives in, as it does for any memory manager: do not call it while tracepool
memory is in use.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util

from tracepool import _tracepool

__all__ = ["TracepoolMemoryManager", "install"]

LEGACY_STREAM = 1  # CU_STREAM_LEGACY: waits for, and is waited for by, every blocking stream


def _free(ptr: int) -> None:
    # A weakref finalizer: on any thread, at exit too. Fenced on the legacy stream (module docstring).
    _tracepool.record_stream(ptr, LEGACY_STREAM)
    _tracepool.free(ptr)


def _numba_cuda():
    if importlib.util.find_spec("numba") is None:
        raise RuntimeError("tracepool.numba: Numba is not installed (pip install numba numba-cuda)")
    from numba import cuda

    return cuda


try:  # the CUDA simulator (NUMBA_ENABLE_CUDASIM=1) and a missing Numba have no EMM classes
    from numba.cuda import GetIpcHandleMixin, HostOnlyCUDAMemoryManager, MemoryInfo, MemoryPointer
    from numba.cuda.cudadrv import driver as _driver
except ImportError as e:  # noqa: F841 - said when used
    _missing = "tracepool.numba: Numba's CUDA memory-manager classes are not available here (%s)" % e

    def __getattr__(name):
        if name in ("TracepoolMemoryManager", "_numba_memory_manager"):
            raise ImportError(_missing)
        raise AttributeError(name)

else:
    _missing = None

    def _device_pointer(ptr: int):
        binding = getattr(_driver, "binding", None)
        return binding.CUdeviceptr(ptr) if binding is not None else ctypes.c_void_p(ptr)

    class TracepoolMemoryManager(GetIpcHandleMixin, HostOnlyCUDAMemoryManager):
        """Numba's memory manager interface (version 1) over tracepool's process-wide instance."""

        @property
        def interface_version(self) -> int:
            return 1

        def _device(self) -> int:
            return self.context.device.id if self.context is not None else 0

        _ready = False

        def initialize(self) -> None:
            # Numba calls this on every context push and every numba.cuda.current_context(), so on each
            # array made and each kernel launched: the work is done once per manager. It makes sure the
            # instance exists (a bad TRACEPOOL_CONF fails here, before any kernel), and, as Numba's own
            # manager does, sizes the queue of host-memory frees by the device's memory.
            if self._ready:
                return
            _tracepool.stats(self._device())
            if not self.deallocations.memory_capacity:  # Numba's _SizeNotSet is 0
                self.deallocations.memory_capacity = _tracepool.mem_get_info(self._device())[1]
            self._ready = True

        def memalloc(self, size: int):
            _tracepool.tag_push("numba")
            try:
                ptr = _tracepool.alloc(size, self._device(), 0)
            finally:
                _tracepool.tag_pop()
            if ptr == 0:  # size 0: no memory, nothing to free
                return MemoryPointer(self.context, _device_pointer(0), size, finalizer=None)
            # The finalizer holds the address only: not the MemoryPointer, not this manager.
            return MemoryPointer(self.context, _device_pointer(ptr), size, finalizer=lambda: _free(ptr))

        def get_memory_info(self):
            free, total = _tracepool.mem_get_info(self._device())
            return MemoryInfo(free=free, total=total)

        def reset(self) -> None:
            super().reset()
            _tracepool.empty_cache(self._device())

        @contextlib.contextmanager
        def defer_cleanup(self):
            # tracepool defers nothing itself: its frees are fenced, not delayed. Numba's host memory is.
            with super().defer_cleanup():
                yield

    _numba_memory_manager = TracepoolMemoryManager  # NUMBA_CUDA_MEMORY_MANAGER=tracepool.numba


def install(conf: str | None = None) -> None:
    """numba.cuda.set_memory_manager(TracepoolMemoryManager): before Numba creates its first context.

    ``conf`` configures tracepool's process-wide instance first, as tracepool.configure. Raises
    RuntimeError where Numba or its memory-manager classes are missing."""
    cuda = _numba_cuda()
    if _missing is not None:
        raise RuntimeError(_missing)
    if conf is not None:
        import tracepool

        tracepool.configure(conf)
    cuda.set_memory_manager(TracepoolMemoryManager)
