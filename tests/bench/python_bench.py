"""What Python call sites cost per allocation, through the Python package (host backend, no GPU).

    python tests/bench/python_bench.py [--pairs N] [--depth D] [--rounds R]

Each capture mode runs in its own process (the default instance is configured once per process):
alloc+free pairs through tracepool.alloc/free (the GIL is released around the call, as a PyTorch op
releases it), and through ctypes, from a Python stack D frames deep. Prints ns per pair, the median
of R rounds, and what each mode adds over capture:off measured in the same run. Measures and prints;
asserts nothing about speed.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

MODES = ("off", "python", "native", "all", "hybrid")

CHILD = r"""
import ctypes, json, sys, time
import tracepool
pairs, depth, rounds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
lib = ctypes.CDLL(tracepool.library_path())
lib.tracepool_default.restype = ctypes.c_void_p
lib.tracepool_malloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                                 ctypes.POINTER(ctypes.c_void_p)]
lib.tracepool_free.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
tp = lib.tracepool_default()

def via_package():
    alloc, free = tracepool.alloc, tracepool.free
    t = time.perf_counter_ns()
    for _ in range(pairs):
        free(alloc(4096))
    return (time.perf_counter_ns() - t) / pairs

def via_ctypes():
    p = ctypes.c_void_p()
    ref = ctypes.byref(p)
    t = time.perf_counter_ns()
    for _ in range(pairs):
        lib.tracepool_malloc(tp, 4096, 0, None, ref)
        lib.tracepool_free(tp, p, None)
    return (time.perf_counter_ns() - t) / pairs

def nested(n, fn):
    return fn() if n == 0 else nested(n - 1, fn)

out = {}
for name, fn in (("package", via_package), ("ctypes", via_ctypes)):
    nested(depth, fn)  # warm: sites interned, frames described
    out[name] = sorted(nested(depth, fn) for _ in range(rounds))[rounds // 2]
print(json.dumps(out))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=100000)
    ap.add_argument("--depth", type=int, default=20, help="Python frames below the measuring loop")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    results = {}
    for mode in MODES:
        env = dict(os.environ, TRACEPOOL_CONF=f"backend:host,capture:{mode}")
        run = subprocess.run([sys.executable, "-c", CHILD, str(args.pairs), str(args.depth), str(args.rounds)],
                             env=env, capture_output=True, text=True, check=True)
        results[mode] = json.loads(run.stdout)
    print(f"ns per alloc+free pair, median of {args.rounds} rounds of {args.pairs}, Python depth {args.depth}")
    print(f"{'capture':<8} {'package':>10} {'+ over off':>11} {'ctypes':>10} {'+ over off':>11}")
    for mode in MODES:
        r, off = results[mode], results["off"]
        print(f"{mode:<8} {r['package']:>10.0f} {r['package'] - off['package']:>+11.0f} "
              f"{r['ctypes']:>10.0f} {r['ctypes'] - off['ctypes']:>+11.0f}")
    print(json.dumps({"python_bench": results, "depth": args.depth}))


if __name__ == "__main__":
    main()
