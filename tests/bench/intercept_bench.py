"""What the interposer adds to each allocation it sees, without a GPU: cuMemAlloc + cuMemFree pairs of 64 KiB on
the stand-in driver (tests/support/stand_in_cuda.c), whose own pair costs about a malloc and a free, so the
difference is the interposer's (the wrapper, the call site, the record and its release).

    python tests/bench/intercept_bench.py [--build build] [--pairs N] [--rounds R]

Runs tests/support/intercept_client.c's bench mode (built by CMake in BUILD) with and without
LD_PRELOAD=libtracepool_intercept.so, R rounds interleaved, each capture mode in turn (TRACEPOOL_CONF capture:
off, native); prints the median ns per pair of each, its spread, and what the interposer adds. Measures and
prints; asserts nothing about speed. The GPU check's cost row (tests/gpu/intercept_check.py) times the same
on the real driver, where a cudaMalloc + cudaFree pair takes 80 to 100 us and the difference is in the noise.
"""
import argparse
import os
import pathlib
import statistics
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(build, pairs, env):
    child = subprocess.run([str(build / "tests" / "tracepool_intercept_client"), "bench", str(pairs)], env=env,
                           capture_output=True, text=True, timeout=300)
    if child.returncode != 0 or "ns_per_pair " not in child.stdout:
        raise SystemExit("intercept_client bench failed (exit %d): %s" % (child.returncode, child.stderr[-500:]))
    return float(child.stdout.split("ns_per_pair ")[1].split()[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=str(ROOT / "build"), help="the CMake build folder (default build/)")
    parser.add_argument("--pairs", type=int, default=200000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    build = pathlib.Path(args.build)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TRACEPOOL_", "LD_PRELOAD"))}
    base["LD_LIBRARY_PATH"] = str(build / "tests" / "stand-in-cuda")
    variants = {"driver alone": base}
    for capture in ("off", "native"):
        variants["interposer, capture:" + capture] = dict(
            base, LD_PRELOAD=str(build / "plugins" / "intercept" / "libtracepool_intercept.so"),
            TRACEPOOL_CONF="backend:host,capture:" + capture)
    times = {name: [] for name in variants}
    for r in range(args.rounds):
        order = list(variants.items()) if r % 2 == 0 else list(reversed(variants.items()))
        for name, env in order:
            times[name].append(run(build, args.pairs, env))
    baseline = statistics.median(times["driver alone"])
    print("cuMemAlloc(64 KiB) + cuMemFree on the stand-in driver, %d pairs, %d rounds interleaved (ns per pair):"
          % (args.pairs, args.rounds))
    for name, t in times.items():
        m = statistics.median(t)
        print("  %-28s median %8.1f  spread %8.1f-%8.1f  added %+8.1f (%.2fx)" % (name, m, min(t), max(t), m - baseline,
                                                                              m / baseline))


if __name__ == "__main__":
    main()
