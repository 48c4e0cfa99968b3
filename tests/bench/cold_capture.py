"""What call sites cost when the caches are cold, as inside a model step, on the host backend (no GPU).

    python tests/bench/cold_capture.py [--pairs N] [--depth D] [--evict MiB] [--rounds R]

python_bench.py repeats one alloc+free pair back to back, so every line capture reads stays in the
caches; inside a PyTorch step the CPU runs kernels' launch code, autograd and the optimizer between two
allocations, and capture's frames, tables and site counters are cold (on the H200 the same code cost
3-5x what python_bench shows). Here each pair is followed by a memset over an EVICT-MiB buffer, and
only the time inside tracepool_malloc and tracepool_free is counted, by tests/gpu/timed_shim.cpp (built
here with g++ and preloaded), from a Python stack D frames deep. Each capture mode runs in its own
process, R rounds interleaved; prints the median ns per pair inside tracepool, its spread, and what each
mode adds over capture:off. Measures and prints; asserts nothing about speed. A CPU-side stand-in for
the GPU check's timed rows (TRACEPOOL_GPU_STEPS=capture tests/gpu/run.sh), for trying a change
without the GPU machine: compare two builds by running this under each, interleaved.
"""
import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

MODES = ("off", "python", "native", "all")
ROOT = pathlib.Path(__file__).resolve().parents[2]

CHILD = r"""
import ctypes, sys, tracepool
pairs, depth, evict = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) << 20
buf = ctypes.create_string_buffer(max(evict, 1))
shim = ctypes.CDLL(None)
for name in ("timed_ns", "timed_allocs"):
    getattr(shim, name).restype = ctypes.c_uint64

def nested(n, fn):
    return fn() if n == 0 else nested(n - 1, fn)

def loop():
    for i in range(pairs):
        tracepool.free(tracepool.alloc(4096))
        ctypes.memset(buf, i & 255, evict)

nested(depth, loop)  # warm: the site interned, the walk remembered
ns, allocs = shim.timed_ns(), shim.timed_allocs()
nested(depth, loop)
print((shim.timed_ns() - ns) / (shim.timed_allocs() - allocs))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3000)
    ap.add_argument("--depth", type=int, default=20, help="Python frames below the measuring loop")
    ap.add_argument("--evict", type=int, default=32, help="MiB written between two pairs")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    import tracepool  # the package under test: its library is the one timed
    with tempfile.TemporaryDirectory() as tmp:
        shim = os.path.join(tmp, "timed_shim.so")
        subprocess.run(["g++", "-O2", "-std=c++17", "-shared", "-fPIC", str(ROOT / "tests/gpu/timed_shim.cpp"),
                        "-o", shim, "-ldl"], check=True)
        results = {m: [] for m in MODES}
        for r in range(args.rounds):
            for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
                env = dict(os.environ, TRACEPOOL_CONF=f"backend:host,capture:{mode}", LD_PRELOAD=shim,
                           TRACEPOOL_TIMED_LIB=tracepool.library_path())
                run = subprocess.run([sys.executable, "-c", CHILD, str(args.pairs), str(args.depth), str(args.evict)],
                                     env=env, capture_output=True, text=True, check=True)
                results[mode].append(float(run.stdout))
    print(f"ns inside tracepool per alloc+free pair, {args.evict} MiB written between pairs, Python depth "
          f"{args.depth}; median of {args.rounds} interleaved processes of {args.pairs} pairs")
    off = statistics.median(results["off"])
    for mode in MODES:
        v = results[mode]
        print(f"{mode:<7} {statistics.median(v):>7.0f} ({min(v):.0f}-{max(v):.0f})  "
              f"{statistics.median(v) - off:>+6.0f} over off")


if __name__ == "__main__":
    main()
