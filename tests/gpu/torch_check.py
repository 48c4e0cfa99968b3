"""PyTorch checks and benchmarks of tracepool on the GPU machine; tests/gpu/run.sh runs them, one
process per allocator (PyTorch's allocator is chosen once per process, before CUDA starts).

    torch_check.py CHECK[,CHECK...] --allocator ALLOCATOR [--history] [--report PATH] [--skip REASON] ...
    torch_check.py report DIR      (no torch: DIR/*.out and *.rc -> "STATUS|step|detail" summary rows)

CHECK is train, empty_loop, inference, gpt2_step or resnet_step; a process runs its checks in
order, emptying the cache between them. It prints {"plan": [[check, allocator], ...]} first and
then one line {"check": ..., "allocator": ..., "status": "ok" | "skip" | "error", ...} per check.

ALLOCATOR is native (PyTorch's own; --history also times each check again under
torch.cuda.memory._record_memory_history(stacks="python") and (stacks="all"), reported as the
allocators hist_python and hist_all); tracepool, tp_python, tp_all, traced, traced_boost
(tracepool.torch.install() from the installed package, with capture:off, capture:python,
capture:all, capture:native and capture:native,unwinder:boost appended to TRACEPOOL_CONF); or
minimal, timed (tests/gpu/reference_plugins.cpp through --ref-lib: a baseline plugin, and
tracepool's plain entry points from --lib with their time measured). The traced train run also
writes tracepool's JSON report (--report). `report` compares the best round of each (check,
allocator) and prints rows; run.sh turns them into the summary table.
"""
import argparse
import ctypes
import gc
import json
import os
import statistics
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before torch loads cuBLAS
GiB = float(1 << 30)

STAT_NAMES = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
              "active_bytes", "inactive_split_bytes", "requested_bytes")
COUNTERS = ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free", "num_invalid_frees",
            "limit_bytes")


# Mirrors tracepool_stat_t / tracepool_stat_set_t / tracepool_stats_t in capi/include/tracepool/tracepool.h.
class Stat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("current", "peak", "allocated", "freed")]


class StatSet(ctypes.Structure):
    _fields_ = [(n, Stat) for n in STAT_NAMES]


class Stats(ctypes.Structure):
    _fields_ = ([("size", ctypes.c_size_t)] + [(n, Stat) for n in STAT_NAMES]
                + [(n, ctypes.c_uint64) for n in COUNTERS] + [("small_pool", StatSet), ("large_pool", StatSet)])


assert ctypes.sizeof(Stats) == 8 + 9 * 32 + 6 * 8 + 2 * 9 * 32


def tracepool_stats(lib_path):
    """tracepool's own view of device 0, from tracepool_default(), plus a validate() pass."""
    lib = ctypes.CDLL(lib_path)  # the library PyTorch's allocator calls: same file, same default instance
    lib.tracepool_default.restype = ctypes.c_void_p
    lib.tracepool_last_error.restype = ctypes.c_char_p
    lib.tracepool_backend_name.restype = ctypes.c_char_p
    lib.tracepool_backend_name.argtypes = [ctypes.c_void_p]
    lib.tracepool_get_stats.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(Stats)]
    lib.tracepool_validate.argtypes = [ctypes.c_void_p]
    tp = lib.tracepool_default()
    if not tp:
        return {"error": "tracepool_default() is NULL: " + lib.tracepool_last_error().decode()}
    s = Stats(size=ctypes.sizeof(Stats))
    rc = lib.tracepool_get_stats(tp, 0, ctypes.byref(s))
    if rc != 0:
        return {"error": "tracepool_get_stats: %d %s" % (rc, lib.tracepool_last_error().decode())}
    return {"backend": lib.tracepool_backend_name(tp).decode(), "validate": lib.tracepool_validate(tp),
            "allocated_gib": s.allocated_bytes.current / GiB, "allocated_peak_gib": s.allocated_bytes.peak / GiB,
            "reserved_gib": s.reserved_bytes.current / GiB, "reserved_peak_gib": s.reserved_bytes.peak / GiB,
            "num_ooms": s.num_ooms, "num_invalid_frees": s.num_invalid_frees,
            "num_device_alloc": s.num_device_alloc, "num_device_free": s.num_device_free}


# Allocators that install the tracepool package into PyTorch, and what each appends to TRACEPOOL_CONF.
INSTALLED = {"tracepool": "capture:off", "tp_python": "capture:python", "tp_all": "capture:all",
             "traced": "capture:native", "traced_boost": "capture:native,unwinder:boost",
             "tp_history": "capture:python,history:100000"}
# Allocators from reference_plugins.cpp: (alloc symbol, free symbol); "timed" wraps tracepool_torch_alloc.
REFERENCE = {"minimal": ("minimal_alloc", "minimal_free"), "timed": ("timed_alloc", "timed_free")}
HISTORY = {"hist_python": "python", "hist_all": "all"}  # native + torch.cuda.memory._record_memory_history


def use_allocator(args):
    """Imports torch and, for a plugin, swaps the allocator; nothing here may initialise CUDA.
    Sets args.tp_lib to the libtracepool.so the process allocates from (None for the others)."""
    args.tp_lib = None
    if args.allocator in INSTALLED:
        try:
            import tracepool
            import tracepool.torch
        except ImportError as e:  # not a skip: run.sh installed the package, or said why it could not
            raise RuntimeError("the tracepool package is not importable (see the pip install row): %s" % e) from e
        tracepool.torch.install(",".join(c for c in (os.environ.get("TRACEPOOL_CONF", ""),
                                                     INSTALLED[args.allocator]) if c))
        args.tp_lib = tracepool.library_path()
        import torch
        return torch
    if args.allocator in REFERENCE:
        if not os.path.exists(args.ref_lib):
            raise RuntimeError("library not found: %s (did the build fail?)" % args.ref_lib)
        if args.allocator == "timed":  # untagged, as "tracepool"; read when tracepool_default() is first called
            os.environ["TRACEPOOL_CONF"] = ",".join(c for c in (os.environ.get("TRACEPOOL_CONF", ""), "capture:off") if c)
            ctypes.CDLL(args.lib, mode=ctypes.RTLD_GLOBAL)  # the shim's tracepool_* come from this library
            args.tp_lib = args.lib
    import torch
    if args.allocator in REFERENCE:
        alloc = torch.cuda.memory.CUDAPluggableAllocator(args.ref_lib, *REFERENCE[args.allocator])
        torch.cuda.memory.change_current_allocator(alloc)
    return torch


def device_allocs(torch, args):
    """Device allocations so far (cudaMalloc / cuMemAlloc calls made by the allocator), or None.
    torch.cuda.memory_stats() answers for native and, once installed, for tracepool."""
    if args.allocator in REFERENCE:
        return tracepool_stats(args.tp_lib).get("num_device_alloc") if args.tp_lib else None
    return torch.cuda.memory_stats().get("num_device_alloc")


def allocations(torch, args):
    """Allocation requests so far (for allocations per iteration), or None for the reference plugins."""
    return None if args.allocator in REFERENCE else torch.cuda.memory_stats().get("allocation.all.allocated")


def memory_in_use_gib(torch):
    gc.collect()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()  # no empty_cache: what a cache keeps is the point
    return (total - free) / GiB


# ---- Checks: each sets up and returns measure(), which runs it once and returns its figures ----------
def check_train(torch, args):
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False  # benchmark mode asks the allocator for cacheInfo, which a plugin lacks
    dev = torch.device("cuda")
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, stride=2), torch.nn.ReLU(),
        torch.nn.Flatten(2), torch.nn.LayerNorm(15 * 15), torch.nn.Flatten(1), torch.nn.Linear(32 * 225, 256),
        torch.nn.GELU(), torch.nn.Linear(256, 10)).to(dev)
    # Random labels and a small learning rate: the loss falls slowly, so every step's value means something.
    x = torch.randn(256, 3, 32, 32, generator=torch.Generator().manual_seed(1)).to(dev)
    y = torch.randint(0, 10, (256,), generator=torch.Generator().manual_seed(2)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def measure():
        losses = []
        for _ in range(args.steps or 20):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
        out = {"losses": losses, "losses_hex": [float.hex(v) for v in losses], "torch": torch.__version__,
               "gpu": torch.cuda.get_device_name(0)}
        if args.report and args.allocator in INSTALLED:  # while the model and optimizer still hold memory
            out["report"] = write_report(args.report)
        return out
    return measure


def write_report(path):
    """tracepool.write_report(path, "json"), timed; the report is checked by `report`."""
    import tracepool

    t0 = time.perf_counter()
    try:
        tracepool.write_report(path, "json")
    except Exception as e:  # noqa: BLE001 (the losses stand; the report row says what broke)
        return {"path": path, "error": "%s: %s" % (type(e).__name__, e)}
    return {"path": path, "seconds": time.perf_counter() - t0}


def check_empty_loop(torch, args):
    n = 1 << 20

    def measure():
        t0 = time.perf_counter_ns()
        for _ in range(args.warmup):
            x = torch.empty(n, device="cuda")
            del x
        # A slow allocator (one that calls cudaMalloc: ~75 us a pair) gets fewer pairs, ~3 s a repetition.
        pairs = max(1000, min(args.pairs, int(3e9 * args.warmup / (time.perf_counter_ns() - t0))))
        reps = []
        for _ in range(args.reps):
            t0 = time.perf_counter_ns()
            for _ in range(pairs):
                x = torch.empty(n, device="cuda")
                del x
            reps.append((time.perf_counter_ns() - t0) / pairs)
        return {"ns_per_pair": statistics.median(reps), "pairs": pairs, "reps_ns": [round(r, 1) for r in reps]}
    return measure


def check_inference(torch, args):
    """Small-batch inference, where the CPU's per-op overhead (allocation included) sets the pace."""
    import torchvision  # ImportError becomes a skip
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    model = torchvision.models.resnet18(weights=None).cuda().eval()
    x = torch.randn(1, 3, 224, 224, device="cuda")

    def measure():
        with torch.inference_mode():
            for _ in range(50):
                model(x)
            torch.cuda.synchronize()
            allocs0, reps = allocations(torch, args), []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                for _ in range(args.iters):
                    model(x)
                torch.cuda.synchronize()
                reps.append((time.perf_counter() - t0) * 1e3 / args.iters)
        out = {"ms_per_iter": statistics.median(reps), "reps_ms": [round(r, 4) for r in reps]}
        if allocs0 is not None:
            out["allocs_per_iter"] = (allocations(torch, args) - allocs0) / (args.reps * args.iters)
        return out
    return measure


def timed_steps(torch, args, step, warmup, steps):
    for _ in range(warmup):
        step()
    allocs_before = device_allocs(torch, args)
    shim = ctypes.CDLL(args.ref_lib) if args.allocator == "timed" else None
    if shim:
        shim.timed_ns.restype = shim.timed_calls.restype = ctypes.c_uint64
        ns0, calls0 = shim.timed_ns(), shim.timed_calls()
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    out = {"ms_per_step": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
           "steps_ms": [round(t, 2) for t in times], "mem_in_use_gib": memory_in_use_gib(torch)}
    if allocs_before is not None:
        out["device_allocs_in_timed_steps"] = device_allocs(torch, args) - allocs_before
    if shim:
        out["calls_per_step"] = (shim.timed_calls() - calls0) / steps
        out["ms_in_allocator_per_step"] = (shim.timed_ns() - ns0) / steps / 1e6
    return out


def check_gpt2_step(torch, args):
    from transformers import GPT2Config, GPT2LMHeadModel  # ImportError becomes a skip
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, model.config.vocab_size, (8, 1024), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return lambda: timed_steps(torch, args, step, 3, args.steps or 10)


def check_resnet_step(torch, args):
    # As a training loop runs it (issue 15): AdamW, and a fresh batch each step, copied from pinned host
    # memory as a DataLoader's is (one fixed batch and SGD allocate less, and hid the cost of call sites).
    from bench_workloads import resnet50_step  # imports torchvision: ImportError becomes a skip
    step, turn = resnet50_step(torch), [0]

    def next_step():
        turn[0] += 1
        step(turn[0])
    return lambda: timed_steps(torch, args, next_step, 5, args.steps or 12)


def check_history_viz(torch, args):
    """tracepool's allocation history (history:N) as PyTorch's viewer reads it: a small workload, then
    torch.cuda.memory._snapshot() (routed to tracepool) drawn by torch.cuda._memory_viz: the Active
    Memory Timeline (trace_plot) and the event log (trace). The HTML goes to --report if given."""
    def measure():
        import collections

        import torch.cuda._memory_viz as viz
        keep = [torch.empty(1 << 20, device="cuda") for _ in range(8)]  # eight allocs on this line
        del keep[::2]  # four frees
        a = torch.randn(1024, 1024, device="cuda")
        (a @ a).sum().item()
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        traces = snap["device_traces"][torch.cuda.current_device()]
        counts = collections.Counter(e["action"] for e in traces)
        here = sum(1 for e in traces if e["action"] == "alloc" and e["frames"]
                   and e["frames"][0]["filename"].endswith("torch_check.py"))
        html = viz.trace_plot(snap)
        if args.report:
            with open(args.report, "w") as f:
                f.write(html)
        log = viz.trace(snap) if hasattr(viz, "trace") else ""
        del keep, a
        return {"events": len(traces), "actions": dict(counts), "allocs_here": here, "html_bytes": len(html),
                "trace_lines": len((log or "").splitlines()),
                "history": snap.get("allocator_settings", {}).get("history")}
    return measure


CHECKS = {"train": check_train, "empty_loop": check_empty_loop, "inference": check_inference,
          "gpt2_step": check_gpt2_step, "resnet_step": check_resnet_step, "history_viz": check_history_viz}


def with_history(torch, args, stacks, measure):
    """measure() with PyTorch's own allocation history on (the comparison for call-site capture)."""
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks=stacks,
                                             max_entries=args.history_entries, clear_history=True)
    try:
        return measure()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)


def plan(args):
    alloc = [args.allocator] + (list(HISTORY) if args.history else [])
    return [[c, a] for c in args.checks for a in (alloc if c != "train" else [args.allocator])]


def emit(rec):
    print(json.dumps(rec), flush=True)


def run_checks(args):
    planned = plan(args)
    emit({"plan": planned})
    if args.skip:
        for c, a in planned:
            emit({"check": c, "allocator": a, "status": "skip", "reason": args.skip})
        return 0
    try:
        torch = use_allocator(args)
    except ImportError as e:
        for c, a in planned:
            emit({"check": c, "allocator": a, "status": "skip", "reason": "torch not importable: %s" % e})
        return 0
    except Exception as e:  # noqa: BLE001 (every failure must become a JSON line)
        for c, a in planned:
            emit({"check": c, "allocator": a, "status": "error", "error": "%s: %s" % (type(e).__name__, e)})
        return 1
    failed = False
    for check in args.checks:
        variants = [(args.allocator, None)] + (list(HISTORY.items()) if args.history and check != "train" else [])
        measure = None
        for allocator, stacks in variants:
            rec = {"check": check, "allocator": allocator}
            try:
                if measure is None:
                    measure = CHECKS[check](torch, args)
                rec.update(measure() if stacks is None else with_history(torch, args, stacks, measure), status="ok")
            except ImportError as e:
                rec.update(status="skip", reason="import failed: %s" % e)
            except Exception as e:  # noqa: BLE001
                rec.update(status="error", error="%s: %s" % (type(e).__name__, (str(e) or "-").splitlines()[0][:300]))
            failed |= rec["status"] == "error"
            backend = getattr(torch.cuda.memory, "get_allocator_backend", None)
            rec["torch_allocator"] = backend() if backend else "?"  # "pluggable" once swapped
            if args.tp_lib:
                try:
                    rec["tp"] = tracepool_stats(args.tp_lib)
                except Exception as e:  # noqa: BLE001
                    rec["tp"] = {"error": "%s: %s" % (type(e).__name__, e)}
            emit(rec)
        del measure  # the model, optimizer and inputs of this check, then their cached memory
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return 1 if failed else 0


# ---- report: no torch from here on ---------------------------------------------------------------
def load_all(d):
    """{(check, allocator): [record of each round]} from DIR/*.out, and the processes that did not
    exit cleanly. A check a process planned but never reported becomes an error record."""
    runs, exits = {}, []
    for name in sorted(os.listdir(d)):
        if not name.endswith(".out"):
            continue
        planned, got = [], {}
        with open(os.path.join(d, name), errors="replace") as f:
            for line in f:
                if line.startswith('{"plan"'):
                    planned = [tuple(p) for p in json.loads(line)["plan"]]
                elif line.startswith('{"check"'):
                    rec = json.loads(line)
                    got[rec["check"], rec["allocator"]] = rec
        if not planned and not got:
            continue  # another program's output (torch_seeds.py)
        try:
            with open(os.path.join(d, name[:-4] + ".rc")) as f:
                rc = int(f.read().strip() or 0)
        except (OSError, ValueError):
            rc = -1
        if rc not in (0, 1):  # 1: a check failed, and said so in its record
            exits.append("%s: %s" % (name[:-4], "timed out" if rc == 124 else "exit status %d" % rc))
        for key in planned:
            if key not in got:
                got[key] = {"check": key[0], "allocator": key[1], "status": "error",
                            "error": "timed out before it (see torch.log)" if rc == 124 else
                            "the process ended (exit status %d) before it (see torch.log)" % rc}
        for key, rec in got.items():
            runs.setdefault(key, []).append(rec)
    return runs, exits


TIME_KEYS = ("ms_per_step", "ns_per_pair", "ms_per_iter")


def best(runs, check, allocator):
    """The best round (lowest time) of (check, allocator), every round's time in "rounds"; any round
    that broke makes the result that error."""
    recs = runs.get((check, allocator), [])
    if not recs:
        return {"status": "error", "error": "no run (see torch.log)"}
    for rec in recs:
        if rec.get("status") == "error":
            return rec
    ok = [r for r in recs if r.get("status") == "ok"]
    if not ok:
        return recs[0]
    key = next((k for k in TIME_KEYS if k in ok[0]), None)
    if key is None:
        return ok[0]
    return dict(min(ok, key=lambda r: r[key]), rounds=[round(r[key], 2) for r in ok])


def why(rec):
    return rec.get("reason") or rec.get("error") or "?"


def broken(name, **runs):
    """A FAIL row if any run broke, a SKIP row if any was skipped, else None."""
    for who, r in runs.items():
        if r["status"] == "error":
            return "FAIL|%s|%s: %s" % (name, who, why(r))
    for who, r in runs.items():
        if r["status"] != "ok":
            return "SKIP|%s|%s: %s" % (name, who, why(r))
    return None


def pair_row(name, nat, tp, key, fmt, target_ratio=None, who="tracepool"):
    """Compares one number native vs a tracepool run: meets/misses a target, FAIL if a run broke."""
    row = broken(name, native=nat, **{who: tp})
    if row:
        return row
    a, b = nat[key], tp[key]
    if target_ratio is None:
        return "%s|%s|native %s, %s %s (target <= native)" % ("meets" if b <= a else "misses", name, fmt % a, who,
                                                             fmt % b)
    ratio = b / a if a else float("inf")
    rounds = ""
    if len(nat.get("rounds", [])) > 1:
        rounds = " [rounds: native %s, %s %s]" % (nat["rounds"], who, tp.get("rounds"))
    return "%s|%s|native %s, %s %s: %.3fx (target <= %sx)%s" % (
        "meets" if ratio <= target_ratio else "misses", name, fmt % a, who, fmt % b, ratio, target_ratio, rounds)


def added_row(name, base, other, who, base_who, target_ns=None):
    """What capture costs per alloc+free pair: other minus base, in microseconds."""
    row = broken(name, **{base_who: base, who: other})
    if row:
        return row
    added = other["ns_per_pair"] - base["ns_per_pair"]
    status = "info" if target_ns is None else ("meets" if added <= target_ns else "misses")
    target = "" if target_ns is None else " (target <= %.1f us)" % (target_ns / 1e3)
    return "%s|%s|%+.2f us per alloc+free pair: %s %.0f ns vs %s %.0f ns%s [rounds: %s, %s]" % (
        status, name, added / 1e3, who, other["ns_per_pair"], base_who, base["ns_per_pair"], target,
        base.get("rounds"), other.get("rounds"))


def history_cost_row(sites, history, nat, nat_history):
    """What tracepool's history adds over its Python call sites, beside what PyTorch's own history
    (stacks python) adds over PyTorch's allocator, per torch.empty alloc+free pair, in one run."""
    name = "history cost per pair (tracepool vs PyTorch)"
    row = broken(name, python_sites=sites, history=history, native=nat, native_history=nat_history)
    if row:
        return row
    ours = history["ns_per_pair"] - sites["ns_per_pair"]
    theirs = nat_history["ns_per_pair"] - nat["ns_per_pair"]
    return "%s|%s|tracepool history:100000 %+.2f us over python sites (%.0f vs %.0f ns); PyTorch history (python) " \
           "%+.2f us over native (%.0f vs %.0f ns) (target <= 0.20 us) [rounds: %s, %s]" % (
               "meets" if ours <= 200 else "misses", name, ours / 1e3, history["ns_per_pair"], sites["ns_per_pair"],
               theirs / 1e3, nat_history["ns_per_pair"], nat["ns_per_pair"], history.get("rounds"), sites.get("rounds"))


def history_viz_row(rec):
    """The history's events as torch.cuda._memory_viz draws them."""
    name = "history: memory_viz timeline"
    row = broken(name, tp_history=rec)
    if row:
        return row
    acts = rec.get("actions", {})
    ok = (all(acts.get(a, 0) > 0 for a in ("alloc", "free_requested", "free_completed", "segment_alloc"))
          and rec.get("allocs_here", 0) >= 8 and rec.get("html_bytes", 0) > 0)
    return "%s|%s|%d events (%s); %d allocs name torch_check.py; trace_plot HTML %d bytes, trace() %d lines" % (
        "PASS" if ok else "FAIL", name, rec.get("events", 0), ", ".join("%s %d" % kv for kv in sorted(acts.items())),
        rec.get("allocs_here", 0), rec.get("html_bytes", 0), rec.get("trace_lines", 0))


VARIANTS = (("tracepool", "untagged"), ("tp_python", "python sites"), ("tp_all", "python+native"),
            ("hist_python", "history python"), ("hist_all", "history all"))


def ratios_row(name, runs, check, key, fmt, target_ratio=None, variants=VARIANTS):
    """Every variant against native, one row: info, or meets/misses when every variant has a target."""
    nat = best(runs, check, "native")
    if nat["status"] != "ok":
        return "%s|%s|native: %s" % ("FAIL" if nat["status"] == "error" else "SKIP", name, why(nat))
    parts, misses = [], []
    for allocator, label in variants:
        r = best(runs, check, allocator)
        if r["status"] != "ok":
            parts.append("%s: %s" % (label, why(r)))
            misses.append(label)
            continue
        ratio = r[key] / nat[key] if nat[key] else float("inf")
        parts.append("%s %s (%.3fx)" % (label, fmt % r[key], ratio))
        if target_ratio is not None and ratio > target_ratio:
            misses.append(label)
    status = "info" if target_ratio is None else ("misses" if misses else "meets")
    target = "" if target_ratio is None else " (target <= %sx%s)" % (target_ratio, ": missed by " + ", ".join(misses)
                                                                     if misses else "")
    return "%s|%s|native %s; %s%s" % (status, name, fmt % nat[key], "; ".join(parts), target)


def losses_row(step, nat, other, who):
    """PASS when a tracepool variant's training losses equal native's bit for bit."""
    bad = [(w, x) for w, x in (("native", nat), (who, other)) if x["status"] != "ok"]
    if bad:
        return "FAIL|%s|%s: %s" % (step, bad[0][0], why(bad[0][1]))
    if nat["losses_hex"] == other["losses_hex"]:
        return "PASS|%s|%d losses bitwise equal, %.4f to %.4f" % (step, len(nat["losses"]), nat["losses"][0],
                                                                    nat["losses"][-1])
    diff = max((abs(a - b) for a, b in zip(nat["losses"], other["losses"])), default=float("nan"))
    return "FAIL|%s|max abs diff %.3g over %d/%d steps" % (step, diff, len(nat["losses"]), len(other["losses"]))


REPORT_STEP = "torch traced report (train, JSON)"


def report_file_row(rec):
    """The report the traced train run wrote at its end: it parses, has the schema, captured call stacks,
    and its leaks (live blocks) and cached sections are not empty. Its write time informs only."""
    if rec["status"] == "error":
        return "FAIL|%s|train run: %s" % (REPORT_STEP, why(rec))
    if rec["status"] != "ok":
        return "SKIP|%s|%s" % (REPORT_STEP, why(rec))
    info = rec.get("report")
    if not isinstance(info, dict):
        return "FAIL|%s|the traced train run wrote no report (no --report?)" % REPORT_STEP
    if "error" in info:
        return "FAIL|%s|%s" % (REPORT_STEP, info["error"])
    path = info.get("path", "")
    try:
        size = os.path.getsize(path)
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        return "FAIL|%s|report %s unreadable: %s" % (REPORT_STEP, os.path.basename(path), e)
    if not isinstance(doc, dict):
        return "FAIL|%s|report is not a JSON object" % REPORT_STEP
    capture = doc.get("capture") if isinstance(doc.get("capture"), dict) else {}
    problems = [] if doc.get("schema") == "tracepool.report/1" else ["schema %r" % doc.get("schema")]
    problems += [] if capture.get("mode") == "native" else ["capture mode %r" % capture.get("mode")]
    for section in ("leaks", "cached"):
        if not isinstance(doc.get(section), list) or not doc[section]:
            problems.append("%s empty" % section)
    leaks, cached = doc.get("leaks") or [], doc.get("cached") or []
    if leaks and not any(isinstance(x, dict) and x.get("frames") for x in leaks):
        problems.append("no leak site has frames")
    if problems:
        return "FAIL|%s|%s" % (REPORT_STEP, "; ".join(problems))
    gib = lambda items: sum(x.get("bytes", 0) for x in items if isinstance(x, dict)) / GiB
    return ("PASS|%s|written in %.3f s (%.0f KiB): %s, %d leak sites (%.2f GiB live), %d cached sites (%.2f GiB),"
            " %s sites interned" % (REPORT_STEP, info.get("seconds", float("nan")), size / 1024, doc["schema"],
                                    len(leaks), gib(leaks), len(cached), gib(cached), capture.get("sites", "?")))


AGREE_STEP = "torch stacks: auto unwinder = boost"


def unwinders_agree_row(auto_rec, boost_rec):
    """The traced train run (unwinder:auto, cfi here) and the same run with unwinder:boost must report the
    same call sites: the same (bytes, frames as function/file/line) for every live site."""
    docs = []
    for rec in (auto_rec, boost_rec):
        info = rec.get("report") if rec.get("status") == "ok" else None
        if not isinstance(info, dict) or "path" not in info:
            return "FAIL|%s|%s run wrote no report: %s" % (AGREE_STEP, rec.get("allocator", "?"), why(rec))
        try:
            with open(info["path"]) as f:
                docs.append(json.load(f))
        except (OSError, ValueError) as e:
            return "FAIL|%s|report unreadable: %s" % (AGREE_STEP, e)

    def sites(doc):
        return sorted((x.get("bytes"), tuple((f.get("function"), f.get("file"), f.get("line"))
                                             for f in x.get("frames", []))) for x in doc.get("leaks", []))
    a, b = sites(docs[0]), sites(docs[1])
    unwinder = docs[0].get("capture", {}).get("unwinder")
    slow = docs[0].get("capture", {}).get("cfi_slow_stacks")
    frames = sum(len(s[1]) for s in a)
    if a != b:
        diff = len(set(a) ^ set(b))
        return "FAIL|%s|%s and boost differ in %d of %d leak sites" % (AGREE_STEP, unwinder, diff, max(len(a), len(b)))
    return "PASS|%s|%s: %d leak sites, %d frames, identical to boost's; stacks left to boost: %s" % (
        AGREE_STEP, unwinder, len(a), frames, slow)


def stats_row(runs):
    """tracepool's integrity after every run that got far enough to ask it."""
    tps = [("%s/%s" % key, r["tp"]) for key, recs in sorted(runs.items()) for r in recs if "tp" in r]
    if not tps:
        return "SKIP|tracepool stats after torch runs|no tracepool run reached the stats call"
    bad = ["%s: %s" % (c, s["error"]) for c, s in tps if "error" in s]
    bad += ["%s: %s=%s" % (c, k, s[k]) for c, s in tps if "error" not in s
            for k, ok in (("validate", 0), ("num_invalid_frees", 0), ("num_ooms", 0), ("backend", "cuda"))
            if s.get(k) != ok]
    peak = max((s.get("reserved_peak_gib", 0) for _, s in tps), default=0)
    return "%s|tracepool stats after torch runs|%s" % ("FAIL" if bad else "PASS", "; ".join(bad)[:200] if bad else
                                                       "%d runs: validate ok, 0 invalid frees, 0 OOMs, peak reserved "
                                                       "%.2f GiB" % (len(tps), peak))


def reference_row(label, nat, minimal, timed):
    """Information only: the minimal plugin's step time, and time spent inside tracepool per step."""
    parts = []
    if nat.get("status") == "ok" and minimal.get("status") == "ok":
        parts.append("minimal plugin %.1f ms (%.3fx native)" % (minimal["ms_per_step"],
                                                               minimal["ms_per_step"] / nat["ms_per_step"]))
    if timed.get("status") == "ok" and "calls_per_step" in timed:
        parts.append("timed tracepool %.1f ms/step, %.0f calls/step, %.2f ms inside tracepool, %s device allocs"
                     % (timed["ms_per_step"], timed["calls_per_step"], timed["ms_in_allocator_per_step"],
                        timed.get("device_allocs_in_timed_steps", "?")))
    if nat.get("status") == "ok":
        parts.append("native device allocs in timed steps %s" % nat.get("device_allocs_in_timed_steps", "?"))
    return "info|%s reference|%s" % (label, "; ".join(parts) or "no reference runs")


def report(d):
    if not os.path.isdir(d):
        print("FAIL|torch report|no such directory: %s" % d)
        return 0
    runs, exits = load_all(d)
    r = lambda c, a: best(runs, c, a)  # noqa: E731
    nat = r("train", "native")
    print(losses_row("torch train: losses equal native", nat, r("train", "tracepool"), "tracepool"))
    print(losses_row("torch train, traced: losses = native", nat, r("train", "traced"), "traced"))
    print(report_file_row(r("train", "traced")))
    print(unwinders_agree_row(r("train", "traced"), r("train", "traced_boost")))
    print(stats_row(runs))
    print("%s|torch processes exit cleanly|%s" % ("FAIL" if exits else "PASS",
                                                   "; ".join(exits)[:300] or "every torch_check.py process"))

    # torch.empty alloc+free through Python: untagged vs native, then what each kind of capture adds.
    print(pair_row("torch.empty loop ns/pair", r("empty_loop", "native"), r("empty_loop", "tracepool"),
                   "ns_per_pair", "%.0f", 1.0))
    untagged = r("empty_loop", "tracepool")
    print(added_row("torch.empty loop, python sites", untagged, r("empty_loop", "tp_python"), "python sites",
                    "untagged", 500))
    print(added_row("torch.empty loop, python+native", untagged, r("empty_loop", "tp_all"), "python+native",
                    "untagged", 1500))
    for allocator, label in (("hist_python", "history python"), ("hist_all", "history all")):
        print(added_row("torch.empty loop, native %s" % label, r("empty_loop", "native"), r("empty_loop", allocator),
                        label, "native"))
    print(history_cost_row(r("empty_loop", "tp_python"), r("empty_loop", "tp_history"), r("empty_loop", "native"),
                           r("empty_loop", "hist_python")))
    print(history_viz_row(r("history_viz", "tp_history")))
    print(ratios_row("inference ms/iter (ResNet-18, batch 1)", runs, "inference", "ms_per_iter", "%.3f"))
    allocs = r("inference", "native").get("allocs_per_iter")
    if allocs is not None:
        print("info|inference allocations|%.1f allocations per iteration (native)" % allocs)

    for c, label in (("gpt2_step", "GPT-2"), ("resnet_step", "ResNet-50")):
        print(pair_row(label + " step ms", r(c, "native"), r(c, "tracepool"), "ms_per_step", "%.1f", 1.02))
        print(ratios_row(label + " step ms, call sites on", runs, c, "ms_per_step", "%.1f", 1.02,
                         variants=VARIANTS[1:3]))
        print(ratios_row(label + " step ms, PyTorch history", runs, c, "ms_per_step", "%.1f", variants=VARIANTS[3:]))
        print(pair_row(label + " memory in use GiB", r(c, "native"), r(c, "tracepool"), "mem_in_use_gib", "%.2f"))
        print(pair_row(label + " memory in use GiB, python+native", r(c, "native"), r(c, "tp_all"), "mem_in_use_gib",
                       "%.2f", who="python+native"))
        print(reference_row(label, r(c, "native"), r(c, "minimal"), r(c, "timed")))
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "report":
        try:
            return report(sys.argv[2])
        except Exception as e:  # noqa: BLE001 (rows printed so far stand; the rest become one FAIL row)
            print("FAIL|torch report|torch_check.py report crashed: %s: %s" % (type(e).__name__, e))
            return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checks", help="comma-separated: " + ", ".join(CHECKS))
    p.add_argument("--allocator", choices=("native",) + tuple(INSTALLED) + tuple(REFERENCE), required=True)
    p.add_argument("--history", action="store_true", help="native: also time each check under PyTorch's history")
    p.add_argument("--history-entries", type=int, default=100_000, help="max_entries of the history ring buffer")
    p.add_argument("--lib", default="build/capi/libtracepool.so", help="libtracepool.so for the timed plugin")
    p.add_argument("--ref-lib", default="build/reference_plugins.so", help="reference_plugins.cpp, built")
    p.add_argument("--steps", type=int, default=0, help="train: steps (20); gpt2/resnet: timed steps (10/12)")
    p.add_argument("--pairs", type=int, default=50_000, help="empty_loop: alloc+free pairs per repetition")
    p.add_argument("--reps", type=int, default=5, help="empty_loop, inference: repetitions (median reported)")
    p.add_argument("--warmup", type=int, default=10_000, help="empty_loop: warm-up pairs")
    p.add_argument("--iters", type=int, default=50, help="inference: iterations per repetition")
    p.add_argument("--report", default="", help="train: write tracepool's JSON report here at the end")
    p.add_argument("--skip", default="", help="print skip records for the plan and exit (run.sh: budget spent)")
    args = p.parse_args()
    args.checks = args.checks.split(",")
    unknown = [c for c in args.checks if c not in CHECKS]
    if unknown:
        p.error("unknown check(s): %s" % ", ".join(unknown))
    if args.history and args.allocator != "native":
        p.error("--history is for --allocator native")
    return run_checks(args)


if __name__ == "__main__":
    sys.exit(main())
