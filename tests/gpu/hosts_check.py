"""CuPy, Numba and PyTorch + CuPy + Numba in one process under tracepool, each against the runtimes'
own allocators; tests/gpu/run.sh runs it, one process per allocator and round.

    hosts_check.py run --allocator native|tracepool|tracepool_off [--checks a,b] [--bench] --out FILE.json
    hosts_check.py compare FILE.json [FILE.json ...]

`native` leaves every runtime its own pool (CuPy's MemoryPool, Numba's default manager, PyTorch's
caching allocator); `tracepool` installs tracepool into all three (call sites on: the default
capture); `tracepool_off` the same with capture:off. `run` writes {"allocator", "checks": {name:
{"status", "result", "detail"}}, "bench": {name: [us per step, one per repetition]}}. Every check is
seeded, so the allocators compute the same numbers: `compare` requires equal results and prints
"STATUS|step|detail" rows, and the benchmark rows give tracepool's median time per step over
native's, with and without call sites: for CuPy against CuPy's pool in the same process, one rep
each in turn (_paired: the spread between processes was as large as what is measured), for Numba,
whose memory manager cannot change within a process, against the native processes run.sh
interleaves with tracepool's.
"""
import faulthandler
import json
import os
import statistics
import sys
import time
import traceback

from check_cli import close, line_of, main

faulthandler.enable()

CHECKS = ("cupy_results", "cupy_leak", "numba_results", "numba_leak", "mixed_one_pool", "mixed_memory",
          "readme_quick_starts")
TRACEPOOL_ONLY = ("cupy_leak", "numba_leak", "mixed_one_pool", "readme_quick_starts")
EPOCHS = 4


def _install(allocator):
    """Makes tracepool every runtime's allocator (PyTorch first, before CUDA is initialised)."""
    if allocator == "native":
        return
    import tracepool

    if allocator == "tracepool_off":
        tracepool.configure("capture:off")
    import tracepool.cupy
    import tracepool.numba
    import tracepool.torch

    tracepool.torch.install()
    tracepool.cupy.install()
    tracepool.numba.install()


def _user_frame(site):
    """The Python frame a report shows for `site`: the innermost one outside installed packages and the
    standard library (CuPy's and Numba's own Python code sits between the user's line and the allocator),
    as the text report chooses it (report_text.cpp, is_library); None without Python frames."""
    python = [f for f in site["frames"] if f["kind"] == "python"]
    library = ("/site-packages/", "/dist-packages/", "/lib/python3")
    user = [f for f in python if not any(p in (f["file"] or "") for p in library) and
            not (f["file"] or "").startswith("<frozen")]
    return (user or python or [None])[0]


def _growing_site(tag, marker):
    """The report's leaked site tagged `tag` whose user frame is this file's `marker` line."""
    import tracepool

    line = line_of(__file__, marker)
    report = json.loads(tracepool.report("json"))
    for site in report["leaks"]:
        frame = _user_frame(site)
        if tag in site["tags"] and frame and frame["file"].endswith("hosts_check.py") and frame["line"] == line:
            if not site["growing"]:
                raise AssertionError("the %s site at line %d is not flagged growing: %s" % (tag, line, site))
            return "%s: %d bytes in %d blocks at hosts_check.py:%d, growing" % (tag, site["bytes"], site["blocks"], line)
    raise AssertionError("no %s site at hosts_check.py:%d among %s" % (
        tag, line, [(s["tags"], _user_frame(s) and "%s:%s" % (_user_frame(s)["file"], _user_frame(s)["line"]))
                    for s in report["leaks"]]))


# ---- Checks --------------------------------------------------------------------------------------------

def check_cupy_results(allocator):
    """Elementwise and reduction work on fresh seeded arrays, on the default stream and on a stream of its own."""
    import cupy as cp

    sums = []
    stream = cp.cuda.Stream(non_blocking=True)
    for step in range(20):
        rng = cp.random.RandomState(step)
        with stream if step % 2 else cp.cuda.Stream.null:
            a = rng.standard_normal((512, 512), dtype=cp.float32)
            b = cp.tanh(a) * 3 + a.T
            sums.append(float(b.sum(dtype=cp.float64)))
    stream.synchronize()
    return sums, "20 steps, half on a non-blocking stream; sums %.4f .. %.4f" % (sums[0], sums[-1])


def check_cupy_leak(allocator):
    """Arrays kept in a list across epochs: the report names the line and flags it growing."""
    import cupy as cp
    import tracepool

    kept = []
    for epoch in range(EPOCHS):
        kept.append(cp.ones(1 << 20, dtype=cp.float32))  # CUPY_LEAK
        tracepool.mark("epoch %d" % epoch)
    return None, _growing_site("cupy", "# CUPY_LEAK")


def _numba_add():
    from numba import cuda

    @cuda.jit
    def add(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] * 2.0 + b[i]

    return add


def check_numba_results(allocator):
    """A kernel on device arrays made every step (to_device, device_array), results copied back."""
    import numpy as np
    from numba import cuda

    add = _numba_add()
    sums = []
    for step in range(20):
        rng = np.random.default_rng(step)
        a = cuda.to_device(rng.standard_normal(1 << 16).astype(np.float32))
        b = cuda.to_device(rng.standard_normal(1 << 16).astype(np.float32))
        out = cuda.device_array(1 << 16, dtype=np.float32)
        add[(1 << 16) // 256, 256](a, b, out)
        sums.append(float(out.copy_to_host().astype(np.float64).sum()))
    return sums, "20 steps of to_device, device_array and a kernel; sums %.4f .. %.4f" % (sums[0], sums[-1])


def check_numba_leak(allocator):
    import numpy as np
    from numba import cuda

    import tracepool

    kept = []
    for epoch in range(EPOCHS):
        kept.append(cuda.device_array(1 << 20, dtype=np.float32))  # NUMBA_LEAK
        tracepool.mark("epoch %d" % epoch)
    return None, _growing_site("numba", "# NUMBA_LEAK")


def check_mixed_one_pool(allocator):
    """PyTorch, CuPy and Numba allocate in one process: one pool holds all of it, one report names all three."""
    import cupy as cp
    import numpy as np
    import torch
    from numba import cuda

    import tracepool

    before = tracepool.stats(0)["allocation.all.current"]
    t = torch.ones(1 << 20, device="cuda")  # MIXED_TORCH
    c = cp.ones(1 << 20, dtype=cp.float32)  # MIXED_CUPY
    n = cuda.device_array(1 << 20, dtype=np.float32)  # MIXED_NUMBA
    held = tracepool.stats(0)["allocation.all.current"] - before
    report = json.loads(tracepool.report("json"))
    lines = {}
    for site in report["leaks"]:
        frame = _user_frame(site)
        if frame and frame["file"].endswith("hosts_check.py"):
            lines[frame["line"]] = site["tags"]
    want = {"torch": line_of(__file__, "# MIXED_TORCH"), "cupy": line_of(__file__, "# MIXED_CUPY"),
            "numba": line_of(__file__, "# MIXED_NUMBA")}
    missing = [k for k, line in want.items() if line not in lines]
    if held < 3 or missing:
        raise AssertionError("tracepool holds %d new blocks; sites missing from the report: %s (sites: %s)"
                             % (held, missing, lines))
    if any(runtime not in lines[line] for runtime, line in want.items()):
        raise AssertionError("runtime tags missing: %s" % lines)
    del t, c, n
    return None, "3 runtimes, one pool (%d new blocks), one report naming each line, tagged torch, cupy, numba" % held


def check_mixed_memory(allocator):
    """Device memory used after phases that each runtime runs in turn (the caches are not emptied):
    each runtime's own pool keeps its peak; one shared pool reuses the same memory."""
    import cupy as cp
    import numpy as np
    import torch
    from numba import cuda

    def used():
        free, total = torch.cuda.mem_get_info()
        return total - free

    base = used()
    for _ in range(2):
        x = [torch.empty(256 << 20, dtype=torch.uint8, device="cuda") for _ in range(8)]  # 2 GiB
        del x
        torch.cuda.synchronize()
        y = [cp.empty(256 << 20, dtype=cp.uint8) for _ in range(8)]
        del y
        cp.cuda.Device().synchronize()
        z = [cuda.device_array(256 << 20, dtype=np.uint8) for _ in range(8)]
        del z
        cuda.synchronize()
    grown = used() - base
    return grown, "%.2f GiB of device memory held after the phases" % (grown / 2**30)


def check_readme_quick_starts(allocator):
    """The README's CuPy block as written, and its Numba line with a small program, in processes of their own."""
    import re
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    text = open(os.path.join(root, "README.md")).read()
    cupy_block = re.compile(r"```python\n(.*?)```", re.S).search(text, text.index("### CuPy")).group(1)
    numba_program = ("import numpy as np, tracepool\nfrom numba import cuda\n"
                     "kept = cuda.device_array(1 << 20, dtype=np.float32)\nprint(tracepool.report(format='text'))\n")
    env = dict(os.environ)
    env.pop("TRACEPOOL_CONF", None)
    for name, code, extra in (("cupy", cupy_block, {}),
                              ("numba", numba_program, {"NUMBA_CUDA_MEMORY_MANAGER": "tracepool.numba"})):
        done = subprocess.run([sys.executable, "-c", code], env=dict(env, **extra), capture_output=True, text=True,
                              timeout=180)
        if done.returncode != 0 or "[%s]" % name not in done.stdout:
            raise AssertionError("the README's %s quick start: exit %d, no [%s] site:\n%s\n%s"
                                 % (name, done.returncode, name, done.stdout[-1500:], done.stderr[-1500:]))
    return None, "the CuPy block and the Numba variable each print a report with their runtime's site"


# ---- Benchmarks -----------------------------------------------------------------------------------------

def bench_cupy_small(steps=2000, reps=5):
    """Elementwise and reduction work on many small fresh arrays (CuPy's allocator on every op). us per step."""
    import cupy as cp

    x = cp.arange(4096, dtype=cp.float32)
    times = []
    for _ in range(reps):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for i in range(steps):
            y = (x * 1.5 + i) ** 2
            s = y.sum()
            z = cp.sqrt(y + s)
        cp.cuda.Device().synchronize()
        times.append((time.perf_counter() - t0) / steps * 1e6)
    del z
    return times


def bench_cupy_large(steps=200, reps=5):
    """Fresh 64 MiB arrays each step. us per step."""
    import cupy as cp

    times = []
    for _ in range(reps):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for i in range(steps):
            a = cp.full(16 << 20, i, dtype=cp.float32)
            b = a * 2 + 1
            float(b[-1])
        cp.cuda.Device().synchronize()
        times.append((time.perf_counter() - t0) / steps * 1e6)
    return times


def bench_numba(steps=500, reps=5):
    """A kernel loop that makes its device arrays every step. us per step."""
    import numpy as np
    from numba import cuda

    add = _numba_add()
    a = cuda.to_device(np.ones(1 << 16, dtype=np.float32))
    times = []
    for _ in range(reps):
        cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            out = cuda.device_array(1 << 16, dtype=np.float32)
            tmp = cuda.device_array(1 << 16, dtype=np.float32)
            add[(1 << 16) // 256, 256](a, out, tmp)
        cuda.synchronize()
        times.append((time.perf_counter() - t0) / steps * 1e6)
    return times


def bench_cupy_alloc(steps=20000, reps=5):
    """cupy.cuda.memory.alloc(16 KiB) made and dropped: the allocator's path alone, no kernel. us per pair."""
    import cupy as cp

    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(steps):
            cp.cuda.memory.alloc(16384)
        times.append((time.perf_counter() - t0) / steps * 1e6)
    return times


# (name, function, whether the issue sets it a target): the others inform.
BENCHES = (("cupy_small", bench_cupy_small, True), ("cupy_large", bench_cupy_large, True),
           ("numba", bench_numba, True), ("cupy_alloc", bench_cupy_alloc, False))


def _allocations():
    """Allocations tracepool has made on device 0 so far; None where it is not the allocator."""
    if "tracepool" not in sys.modules:
        return None
    import tracepool

    return tracepool.stats(0)["allocation.all.allocated"]


def _numpy_for_numba_cuda():
    """numba-cuda (0.30 on the GPU machine) registers np.row_stack when it first compiles a kernel, and
    NumPy 2.5 (installed there) no longer has that alias of np.vstack: every kernel compile failed with
    AttributeError, under any allocator (H200, 2026-11-23). The alias is put back for this check's processes only."""
    import numpy as np

    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack


def _paired(fn, pairs=10):
    """A CuPy benchmark in a process where tracepool is CuPy's allocator, against CuPy's own pool in the
    same process: one rep under each in turn (ABBA), so that what differs between processes (the
    CPU the process runs on, its clock) cancels out. Returns (tracepool's times, the pool's times,
    tracepool's allocations per step)."""
    import tracepool.cupy

    def under(which, **kw):
        if which == "tracepool":
            tracepool.cupy.install(free_cached=False)  # the pool keeps its cache: both stay warm
        else:
            tracepool.cupy.uninstall()
        return fn(**kw)

    for which in ("native", "tracepool"):
        under(which, steps=20, reps=1)  # warm: kernels compiled, caches filled
    mine, native, made = [], [], 0
    for rep in range(2 * pairs):
        for which in (("tracepool", "native") if rep % 2 == 0 else ("native", "tracepool")):
            if which == "tracepool":
                before = _allocations()
                mine += under(which, reps=1)
                made += _allocations() - before
            else:
                native += under(which, reps=1)
    tracepool.cupy.install(free_cached=False)
    return mine, native, made / (len(mine) * fn.__defaults__[0])


def run(args):
    _numpy_for_numba_cuda()
    _install(args.allocator)
    out = {"allocator": args.allocator, "checks": {}, "bench": {}}
    for name in [c for c in (args.checks.split(",") if args.checks else []) if c]:
        if args.allocator == "native" and name in TRACEPOOL_ONLY:
            continue
        try:
            result, detail = globals()["check_" + name](args.allocator)
            out["checks"][name] = {"status": "ok", "result": result, "detail": detail}
        except Exception as e:  # noqa: BLE001 - a check's failure is its row
            out["checks"][name] = {"status": "error", "detail": "%s: %s" % (type(e).__name__, str(e)[:400]),
                                   "trace": traceback.format_exc()[-1500:]}
    if args.bench:
        out["allocations_per_step"], out["paired_native"] = {}, {}
        for name, fn, _ in BENCHES:
            try:
                if name.startswith("cupy") and args.allocator != "native":
                    mine, native, allocs = _paired(fn)
                    out["paired_native"][name] = native
                else:
                    fn(steps=20, reps=1)  # warm: kernels compiled, caches filled
                    before = _allocations()
                    mine = fn()
                    allocs = None if before is None else (_allocations() - before) / (fn.__defaults__[0] * fn.__defaults__[1])
                out["bench"][name] = mine
                if allocs is not None:
                    out["allocations_per_step"][name] = allocs
            except Exception as e:  # noqa: BLE001
                out["bench"][name] = "error: %s: %s" % (type(e).__name__, str(e)[:300])
        if _allocations() is not None:  # how capture went: stacks the cfi unwinder could not follow
            import tracepool

            report = json.loads(tracepool.report("json"))
            out["capture"] = {k: v for k, v in report.get("capture", report).items()
                              if k in ("cfi_slow_stacks", "cfi_last_slow", "unwinder", "sites")}
    with open(args.out, "w") as f:
        json.dump(out, f)


def compare(paths):
    runs = [json.load(open(p)) for p in paths if os.path.exists(p)]
    by = {name: [r for r in runs if r["allocator"] == name] for name in ("native", "tracepool", "tracepool_off")}
    rows = []
    n0 = next((r["checks"] for r in by["native"] if r["checks"]), None)
    t0 = next((r["checks"] for r in by["tracepool"] if r["checks"]), None)
    if n0 is None or t0 is None:
        return [["FAIL", "CuPy/Numba (hosts_check.py)", "no process ran the checks: native %s, tracepool %s"
                 % ("ran" if n0 else "none", "ran" if t0 else "none")]]
    for name in CHECKS:
        t = t0.get(name)
        if t is None:
            continue
        step = "hosts: %s" % name
        if t["status"] != "ok":
            rows.append(["FAIL", step, "tracepool: %s" % t["detail"]])
        elif name in TRACEPOOL_ONLY:
            rows.append(["PASS", step, t["detail"]])
        elif name == "mixed_memory":
            n = n0.get(name, {})
            if n.get("status") != "ok":
                rows.append(["FAIL", step, "native failed: %s" % n.get("detail")])
                continue
            rows.append(["meets" if t["result"] < n["result"] else "misses",
                         step + " (target: one shared pool needs less than each runtime's own)",
                         "one shared pool: %s; each runtime's own pool: %s" % (t["detail"], n["detail"])])
        else:
            n = n0.get(name, {})
            if n.get("status") != "ok":
                rows.append(["FAIL", step, "native failed (%s); tracepool: %s" % (n.get("detail"), t["detail"])])
            elif not close(n["result"], t["result"]):
                rows.append(["FAIL", step, "results differ: native %s, tracepool %s" % (n["result"], t["result"])])
            else:
                rows.append(["PASS", step, "equal to the runtime's own allocator; " + t["detail"]])
    per_step = next((r["allocations_per_step"] for r in runs if r.get("allocations_per_step")), {})
    for name, _, targeted in BENCHES:
        def times(allocator):
            return [x for r in by[allocator] if isinstance(r["bench"].get(name), list) for x in r["bench"][name]]

        for allocator, target in (("tracepool", 1.05), ("tracepool_off", 1.0)):
            mine = times(allocator)
            # CuPy's: against CuPy's pool in the same processes (_paired); Numba's: against other processes.
            paired = [(x, y) for r in by[allocator] if isinstance(r["bench"].get(name), list)
                      for x, y in zip(r["bench"][name], r.get("paired_native", {}).get(name, []))]
            native = [y for _, y in paired] or times("native")
            how = ("CuPy's pool in the same processes, reps alternating; rep ratios %.3f-%.3f"
                   % (min(x / y for x, y in paired), max(x / y for x, y in paired)) if paired
                   else "other processes, interleaved")
            step = "bench: %s, %s/native (target <= %.2fx)" % (
                name, "call sites" if allocator == "tracepool" else "capture:off", target)
            if not native or not mine:
                errors = [r["bench"].get(name) for r in runs if isinstance(r["bench"].get(name), str)]
                rows.append(["FAIL", step, "no times: %s" % (errors[:1] or "not run")])
                continue
            ratio = statistics.median(mine) / statistics.median(native)
            allocs = per_step.get(name)
            added = ("; %.1f allocations per step, %+.0f ns per allocation" % (
                allocs, (statistics.median(mine) - statistics.median(native)) * 1e3 / allocs) if allocs else "")
            if not targeted:
                step = "bench: %s, %s/native" % (name, "call sites" if allocator == "tracepool" else "capture:off")
            rows.append(["info" if not targeted else "meets" if ratio <= target else "misses", step,
                         "%.3fx (native %.2f us, %s %.2f us per step; medians of %d and %d reps, spread %.2f-%.2f us%s;"
                         " native: %s)" % (ratio, statistics.median(native), allocator, statistics.median(mine),
                                           len(native), len(mine), min(mine), max(mine), added, how)])
    return rows


if __name__ == "__main__":
    sys.exit(main(CHECKS, ("native", "tracepool", "tracepool_off"), run, compare))
