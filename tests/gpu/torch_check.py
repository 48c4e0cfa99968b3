"""PyTorch checks of tracepool on the GPU machine; tests/gpu/run.sh runs each one as its own process.

    torch_check.py CHECK --allocator native|tracepool|traced|minimal|timed [--lib build/capi/libtracepool.so]
                   [--report PATH]   (train with a tracepool allocator: write a JSON report at its end)
    torch_check.py report DIR      (no torch: turns DIR/<check>.<allocator>.<round>.out files into summary rows)

CHECK is train, empty_loop, gpt2_step or resnet_step. Each prints one JSON line
{"check": ..., "allocator": ..., "status": "ok" | "skip" | "error", ...} last. The allocator is
swapped before anything initialises CUDA, which is why native and tracepool runs are separate
processes. Capture is on by default in tracepool, so "tracepool" (and "timed") run untagged
(TRACEPOOL_CONF gets capture:off) and "traced" records every allocation's call stack at the default
depth. `report` prints "STATUS|step|detail" lines; run.sh turns them into summary rows.
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
    lib = ctypes.CDLL(lib_path)  # the handle PyTorch opened: same library, same default instance
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


def write_report(lib_path, path):
    """tracepool_write_report(tracepool_default(), path, "json"), timed; the report is checked by `report`."""
    lib = ctypes.CDLL(lib_path)
    lib.tracepool_default.restype = ctypes.c_void_p
    lib.tracepool_last_error.restype = ctypes.c_char_p
    lib.tracepool_write_report.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
    tp = lib.tracepool_default()
    if not tp:
        return {"path": path, "error": "tracepool_default() is NULL: " + lib.tracepool_last_error().decode()}
    t0 = time.perf_counter()
    rc = lib.tracepool_write_report(tp, path.encode(), b"json")
    out = {"path": path, "seconds": time.perf_counter() - t0}
    if rc != 0:
        out["error"] = "tracepool_write_report: %d %s" % (rc, lib.tracepool_last_error().decode())
    return out


# allocator -> (library argument, alloc symbol, free symbol). minimal and timed come from
# reference_plugins.cpp (--ref-lib): a baseline plugin, and tracepool with its time measured.
PLUGINS = {"tracepool": ("lib", "tracepool_torch_alloc", "tracepool_torch_free"),
           "traced": ("lib", "tracepool_torch_alloc", "tracepool_torch_free"),
           "traced_boost": ("lib", "tracepool_torch_alloc", "tracepool_torch_free"),
           "minimal": ("ref_lib", "minimal_alloc", "minimal_free"),
           "timed": ("ref_lib", "timed_alloc", "timed_free")}
# What each tracepool allocator appends to TRACEPOOL_CONF (a later key wins over an earlier one).
TRACEPOOL_CONF = {"tracepool": "capture:off", "timed": "capture:off", "traced": "capture:native",
                  "traced_boost": "capture:native,unwinder:boost"}


def use_allocator(args):
    """Imports torch and, for a plugin, swaps the allocator; nothing here may initialise CUDA."""
    plugin = PLUGINS.get(args.allocator)
    if plugin and not os.path.exists(getattr(args, plugin[0])):
        raise RuntimeError("library not found: %s (did the build fail?)" % getattr(args, plugin[0]))
    if args.allocator in TRACEPOOL_CONF:  # read when tracepool_default() is first called
        os.environ["TRACEPOOL_CONF"] = ",".join(
            c for c in (os.environ.get("TRACEPOOL_CONF", ""), TRACEPOOL_CONF[args.allocator]) if c)
    if args.allocator == "timed":
        ctypes.CDLL(args.lib, mode=ctypes.RTLD_GLOBAL)  # the shim's tracepool_* come from the same library
    import torch
    if plugin:
        alloc = torch.cuda.memory.CUDAPluggableAllocator(getattr(args, plugin[0]), plugin[1], plugin[2])
        torch.cuda.memory.change_current_allocator(alloc)
    return torch


def device_allocs(torch, args):
    """Device allocations so far (cudaMalloc / cuMemAlloc calls made by the allocator), or None."""
    if args.allocator == "native":
        return torch.cuda.memory_stats().get("num_device_alloc")
    if args.allocator in TRACEPOOL_CONF:
        return tracepool_stats(args.lib).get("num_device_alloc")
    return None


def memory_in_use_gib(torch):
    gc.collect()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()  # no empty_cache: what a cache keeps is the point
    return (total - free) / GiB


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
    losses = []
    for _ in range(args.steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    out = {"losses": losses, "losses_hex": [float.hex(v) for v in losses], "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0)}
    if args.report and args.allocator in TRACEPOOL_CONF:  # while the model and optimizer still hold memory
        try:
            out["report"] = write_report(args.lib, args.report)
        except Exception as e:  # noqa: BLE001 (the losses stand; the report row says what broke)
            out["report"] = {"path": args.report, "error": "%s: %s" % (type(e).__name__, e)}
    return out


def check_empty_loop(torch, args):
    n = 1 << 20
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
    return timed_steps(torch, args, step, 3, args.steps or 15)


def check_resnet_step(torch, args):
    import torchvision  # ImportError becomes a skip
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).cuda().to(memory_format=torch.channels_last).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(64, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (64,), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return timed_steps(torch, args, step, 5, args.steps or 20)


CHECKS = {"train": check_train, "empty_loop": check_empty_loop, "gpt2_step": check_gpt2_step,
          "resnet_step": check_resnet_step}


def run_check(args):
    out = {"check": args.check, "allocator": args.allocator}
    try:
        torch = use_allocator(args)
    except ImportError as e:
        torch = None
        out.update(status="skip", reason="torch not importable: %s" % e)
    except Exception as e:  # noqa: BLE001 (every failure must become a JSON line)
        torch = None
        out.update(status="error", error="%s: %s" % (type(e).__name__, e))
    if torch is not None:
        try:
            out.update(CHECKS[args.check](torch, args), status="ok")
        except ImportError as e:
            out.update(status="skip", reason="import failed: %s" % e)
        except Exception as e:  # noqa: BLE001
            out.update(status="error", error="%s: %s" % (type(e).__name__, (str(e) or "-").splitlines()[0][:300]))
        backend = getattr(torch.cuda.memory, "get_allocator_backend", None)
        out["torch_allocator"] = backend() if backend else "?"  # "pluggable" once swapped
        if args.allocator in TRACEPOOL_CONF:
            try:
                out["tp"] = tracepool_stats(args.lib)
            except Exception as e:  # noqa: BLE001
                out["tp"] = {"error": "%s: %s" % (type(e).__name__, e)}
    print(json.dumps(out), flush=True)
    return 0 if out["status"] != "error" else 1


# ---- report: no torch from here on ---------------------------------------------------------------
def load(d, check, allocator):
    """The best round of DIR/<check>.<allocator>.<round>.out (lowest time), with every round's time kept
    in "rounds"; any round that broke makes the result that error."""
    recs = [load_round(os.path.join(d, name[:-4])) for name in sorted(os.listdir(d))
            if name.startswith("%s.%s." % (check, allocator)) and name.endswith(".out")]
    if not recs:
        return {"status": "error", "error": "no run (see torch.log)"}
    for rec in recs:
        if rec.get("status") != "ok":
            return rec
    key = next((k for k in ("ms_per_step", "ns_per_pair") if k in recs[0]), None)
    if key is None:
        return recs[0]
    best = min(recs, key=lambda r: r[key])
    return dict(best, rounds=[round(r[key], 1) for r in recs])


def load_round(base):
    """Last JSON line of BASE.out; an exit status != 0 (BASE.rc) makes it an error."""
    rec = {"status": "error", "error": "no result line (see torch.log)"}
    try:
        for line in open(base + ".out", errors="replace"):
            if line.startswith('{"check"'):
                rec = json.loads(line)
        rc = int(open(base + ".rc").read().strip() or 0)
    except (OSError, ValueError) as e:
        return {"status": "error", "error": str(e)}
    if rc == 124:
        rec = {"status": "error", "error": "timed out (see torch.log)"}
    elif rc != 0 and "check" not in rec:
        rec["error"] = "exit status %d, no result line (see torch.log)" % rc
    elif rc != 0 and rec.get("status") == "ok":
        rec = dict(rec, status="error", error="exit status %d after the check finished" % rc)
    return rec


def why(rec):
    return rec.get("reason") or rec.get("error") or "?"


def pair_row(name, nat, tp, key, fmt, target_ratio=None):
    """Compares one number native vs tracepool: meets/misses a target, FAIL if a run broke, SKIP if skipped."""
    for who, r in (("native", nat), ("tracepool", tp)):
        if r["status"] == "error":
            return "FAIL|%s|%s: %s" % (name, who, why(r))
    for who, r in (("native", nat), ("tracepool", tp)):
        if r["status"] != "ok":
            return "SKIP|%s|%s" % (name, why(r))
    a, b = nat[key], tp[key]
    if target_ratio is None:
        return "%s|%s|native %s, tracepool %s (target <= native)" % (
            "meets" if b <= a else "misses", name, fmt % a, fmt % b)
    ratio = b / a if a else float("inf")
    rounds = ""
    if "rounds" in nat and len(nat["rounds"]) > 1:
        rounds = " [rounds: native %s, tracepool %s]" % (nat["rounds"], tp.get("rounds"))
    return "%s|%s|native %s, tracepool %s: %.3fx (target <= %sx)%s" % (
        "meets" if ratio <= target_ratio else "misses", name, fmt % a, fmt % b, ratio, target_ratio, rounds)


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


def traced_row(name, nat, untagged, traced, key, fmt, unit):
    """Information: what recording call sites costs, as traced/native and as traced minus untagged."""
    runs = (("native", nat), ("tracepool", untagged), ("traced", traced))
    for who, r in runs:
        if r["status"] == "error":
            return "FAIL|%s|%s: %s" % (name, who, why(r))
    for who, r in runs:
        if r["status"] != "ok":
            return "SKIP|%s|%s" % (name, why(r))
    a, u, t = nat[key], untagged[key], traced[key]
    rounds = "" if len(nat.get("rounds", [])) < 2 else " [rounds: native %s, tracepool %s, traced %s]" % (
        nat["rounds"], untagged.get("rounds"), traced.get("rounds"))
    return ("info|%s|traced %s: %.3fx native (%s); %+" + fmt[1:] + "%s vs untagged tracepool (%s)%s") % (
        name, fmt % t, t / a if a else float("inf"), fmt % a, t - u, unit, fmt % u, rounds)


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


def report(d):
    if not os.path.isdir(d):
        print("FAIL|torch report|no such directory: %s" % d)
        return 0
    r = {(c, a): load(d, c, a) for c in CHECKS for a in ("native", "tracepool", "traced")}
    print(losses_row("torch train: losses equal native", r["train", "native"], r["train", "tracepool"], "tracepool"))
    print(losses_row("torch train, traced: losses = native", r["train", "native"], r["train", "traced"], "traced"))
    print(report_file_row(r["train", "traced"]))
    print(unwinders_agree_row(r["train", "traced"], load(d, "train", "traced_boost")))
    # Integrity of tracepool after every run that got far enough to ask it.
    tps = [("%s/%s" % (c, a), x["tp"]) for (c, a), x in r.items() if a != "native" and "tp" in x]
    if not tps:
        print("SKIP|tracepool stats after torch runs|no tracepool run reached the stats call")
    else:
        broken = ["%s: %s" % (c, s["error"]) for c, s in tps if "error" in s]
        broken += ["%s: %s=%s" % (c, k, s[k]) for c, s in tps if "error" not in s
                   for k, ok in (("validate", 0), ("num_invalid_frees", 0), ("num_ooms", 0), ("backend", "cuda"))
                   if s.get(k) != ok]
        peak = max((s.get("reserved_peak_gib", 0) for _, s in tps), default=0)
        print("%s|tracepool stats after torch runs|%s" % ("FAIL" if broken else "PASS", "; ".join(broken)[:200] if
              broken else "%d runs: validate ok, 0 invalid frees, 0 OOMs, peak reserved %.2f GiB" % (len(tps), peak)))
    print(pair_row("torch.empty loop ns/pair", r["empty_loop", "native"], r["empty_loop", "tracepool"],
                   "ns_per_pair", "%.0f", 1.0))
    print(traced_row("torch.empty loop ns/pair, traced", r["empty_loop", "native"], r["empty_loop", "tracepool"],
                     r["empty_loop", "traced"], "ns_per_pair", "%.0f", " ns per pair"))
    for c, label in (("gpt2_step", "GPT-2"), ("resnet_step", "ResNet-50")):
        print(pair_row(label + " step ms", r[c, "native"], r[c, "tracepool"], "ms_per_step", "%.1f", 1.02))
        print(traced_row(label + " step ms, traced", r[c, "native"], r[c, "tracepool"], r[c, "traced"],
                         "ms_per_step", "%.1f", " ms per step"))
        print(pair_row(label + " memory in use GiB", r[c, "native"], r[c, "tracepool"], "mem_in_use_gib", "%.2f"))
        print(reference_row(label, r[c, "native"], load(d, c, "minimal"), load(d, c, "timed")))
    return 0


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


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "report":
        try:
            return report(sys.argv[2])
        except Exception as e:  # noqa: BLE001 (rows printed so far stand; the rest become one FAIL row)
            print("FAIL|torch report|torch_check.py report crashed: %s: %s" % (type(e).__name__, e))
            return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("check", choices=sorted(CHECKS))
    p.add_argument("--allocator", choices=("native",) + tuple(PLUGINS), required=True)
    p.add_argument("--lib", default="build/capi/libtracepool.so")
    p.add_argument("--ref-lib", default="build/reference_plugins.so", help="reference_plugins.cpp, built")
    p.add_argument("--steps", type=int, default=0, help="training steps (train: 20; timed steps otherwise)")
    p.add_argument("--pairs", type=int, default=200_000, help="empty_loop: alloc+free pairs per repetition")
    p.add_argument("--reps", type=int, default=5, help="empty_loop: repetitions (median reported)")
    p.add_argument("--warmup", type=int, default=20_000, help="empty_loop: warm-up pairs")
    p.add_argument("--report", default="", help="train: write tracepool's JSON report here at the end")
    args = p.parse_args()
    if args.check == "train" and not args.steps:
        args.steps = 20
    return run_check(args)


if __name__ == "__main__":
    sys.exit(main())
