"""The two ways tracepool can be CuPy's allocator, timed against each other without a GPU.

    python tests/bench/cupy_glue_bench.py [--pairs N] [--rounds R] [--conf TEXT]

C hooks: what tracepool.cupy.install() gives CuPy, a CFunctionAllocator over tracepool's C functions
(driven here through CuPy's own CFunctionAllocatorMemory, which is what its malloc makes). Python
callable: the other door cupy.cuda.set_allocator offers, a Python function that allocates through
tracepool.alloc and wraps the address as MemoryPointer(UnownedMemory(...)) with an owner whose
death frees it. Both on the host backend (TRACEPOOL_CONF, default backend:host): the allocator's own work is
the same in both, so the difference is the glue's. Rounds alternate; prints ns per alloc+free pair,
medians and spread, and the ratio. Measures and prints; asserts nothing about speed.
"""
import argparse
import os
import statistics
import sys
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--conf", default="backend:host")
    args = parser.parse_args()
    os.environ["TRACEPOOL_CONF"] = args.conf

    import cupy

    import tracepool
    import tracepool.cupy
    from tracepool import _tracepool

    tracepool.stats(0)
    malloc, free = tracepool.cupy._install_hooks(None)  # stream 0: CuPy's stream function needs a driver
    make = cupy.cuda.memory.CFunctionAllocatorMemory

    def c_hooks(n):
        for _ in range(n):
            make(65536, 0, malloc, free, 0)  # made and dropped: malloc, then free

    class Owner:  # what UnownedMemory keeps alive: its death frees the block (as RMM's DeviceBuffer)
        __slots__ = ("ptr",)

        def __init__(self, ptr):
            self.ptr = ptr

        def __del__(self):
            _tracepool.free(self.ptr)

    def python_allocator(size):
        ptr = _tracepool.alloc(size, 0, 0)
        return cupy.cuda.memory.MemoryPointer(cupy.cuda.memory.UnownedMemory(ptr, size, Owner(ptr), 0), 0)

    def python_callable(n):
        for _ in range(n):
            python_allocator(65536)

    results = {"C hooks": [], "Python callable": []}
    for r in range(args.rounds):
        order = list(results) if r % 2 == 0 else list(reversed(results))
        for name in order:
            fn = c_hooks if name == "C hooks" else python_callable
            fn(1000)  # warm
            t0 = time.perf_counter()
            fn(args.pairs)
            results[name].append((time.perf_counter() - t0) / args.pairs * 1e9)
    print("CuPy allocator glue on the %s backend, %d pairs x %d rounds (ns per alloc+free pair):"
          % (_tracepool.backend_name(), args.pairs, args.rounds))
    for name, times in results.items():
        print("  %-16s median %7.0f  (min %7.0f, max %7.0f)" % (name, statistics.median(times), min(times), max(times)))
    ratio = statistics.median(results["Python callable"]) / statistics.median(results["C hooks"])
    print("  the Python callable costs %.2fx the C hooks" % ratio)
    return 0


if __name__ == "__main__":
    sys.exit(main())
