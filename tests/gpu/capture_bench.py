"""What call sites cost inside PyTorch (issue 15), on the GPU machine; tests/gpu/run.sh runs it.

    capture_bench.py run VARIANT --out FILE [--workloads W,...] [--quick]
    capture_bench.py report DIR        (no torch: DIR/capture.*.json -> "STATUS|step|detail" rows)

VARIANT, one per process (PyTorch picks its allocator once per process):
  pytorch            PyTorch's own caching allocator
  pytorch_history    the same under torch.cuda.memory._record_memory_history(stacks="all")
  off, python, native, all
                     tracepool.torch.install() with capture:<mode> appended to TRACEPOOL_CONF
                     (all, Python and native frames, is tracepool's default)
  timed_off, timed_python, timed_native, timed_all
                     the same, with tests/gpu/timed_shim.cpp preloaded (run.sh sets LD_PRELOAD and
                     TRACEPOOL_TIMED_LIB): the time spent inside tracepool_malloc and tracepool_free

WORKLOADS (each run once per process, after a warm-up; a process writes one JSON file):
  resnet50   training step: ResNet-50, batch 64, channels_last, bf16 autocast, AdamW, a fresh batch
             each step (copied from pinned host memory, as a DataLoader's batch is)
  gpt2       training step: GPT-2 small, batch 8 x 1024, bf16 autocast, AdamW, fresh tokens each step
  resnet18   inference at batch 1 under inference_mode, a fresh input each iteration
  empty      torch.empty(1 MiB) alloc+free pairs through Python

run.sh runs every variant once per round, rounds in rotated orders, so that drift on the machine is
shared; `report` takes for each variant the median of its rounds' figures, and compares it with
pytorch's (the ratio of the medians, and the range of the ratios of the rounds' figures).
"""
import argparse
import ctypes
import gc
import json
import os
import statistics
import sys
import time

GiB = float(1 << 30)
CAPTURE_MODES = ("off", "python", "native", "all")
VARIANTS = ("pytorch", "pytorch_history") + CAPTURE_MODES + tuple("timed_" + m for m in CAPTURE_MODES)
WORKLOADS = ("resnet50", "gpt2", "resnet18", "empty")
LABELS = {"resnet50": "ResNet-50 AdamW step (fresh batch)", "gpt2": "GPT-2 AdamW step",
          "resnet18": "ResNet-18 inference, batch 1", "empty": "torch.empty loop"}
TARGETS = {"resnet50": 1.02, "gpt2": 1.02, "resnet18": 1.05, "empty": None}  # for the default (all)
UNITS = {"resnet50": "ms", "gpt2": "ms", "resnet18": "ms", "empty": "ns"}
CAPTURE_TARGET_US = 0.3  # default capture, per allocation


def install(variant):
    """Imports torch with the variant's allocator; nothing here may initialise CUDA."""
    mode = variant.split("_", 1)[1] if variant.startswith("timed_") else variant
    if mode in CAPTURE_MODES:
        import tracepool.torch
        tracepool.torch.install(",".join(c for c in (os.environ.get("TRACEPOOL_CONF", ""), "capture:" + mode) if c))
    import torch
    return torch


class Allocations:
    """Allocations made so far, as the allocator counts them (tracepool's and PyTorch's own both answer
    torch.cuda.memory_stats once tracepool is installed)."""

    def __init__(self, torch):
        self.torch = torch

    def __call__(self):
        return self.torch.cuda.memory_stats().get("allocation.all.allocated", 0)


def timed_counters():
    """(ns inside tracepool, allocations, frees) from the preloaded timed shim, or None."""
    try:
        shim = ctypes.CDLL(None)
        fns = [getattr(shim, n) for n in ("timed_ns", "timed_allocs", "timed_frees")]
    except (OSError, AttributeError):
        return None
    for f in fns:
        f.restype = ctypes.c_uint64
    return tuple(f() for f in fns)


def memory_in_use_gib(torch):
    gc.collect()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()  # no empty_cache: what a cache keeps is the point
    return (total - free) / GiB


def pinned_batches(torch, make, count=4):
    """`count` host tensors in pinned memory, copied to the GPU in turn: a fresh input every step."""
    return [make(i).pin_memory() for i in range(count)]


def step_workload(torch, step, warmup, steps):
    """Times `steps` calls of step() after `warmup`, each between synchronisations."""
    for i in range(warmup):
        step(i)
    allocs = Allocations(torch)
    a0, t0 = allocs(), timed_counters()
    times = []
    for i in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step(i)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return {"value": statistics.median(times), "spread": [min(times), max(times)],
            "allocs_per_unit": (allocs() - a0) / steps, "timed": timed_delta(t0),
            "mem_in_use_gib": memory_in_use_gib(torch)}


def timed_delta(before):
    """What the timed shim counted since `before`: ns inside tracepool_malloc and tracepool_free,
    and the calls of each."""
    after = timed_counters()
    if before is None or after is None:
        return None
    ns, allocs, frees = (a - b for a, b in zip(after, before))
    return {"ns": ns, "allocs": allocs, "frees": frees}


def resnet50_step(torch):
    """step(i) of the ResNet-50 training loop (torch_check.py times it too)."""
    import torchvision
    torch.manual_seed(0)
    with torch.device("cuda"):  # initialised on the GPU: seconds less per process than on the CPU
        model = torchvision.models.resnet50(weights=None).to(memory_format=torch.channels_last).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    images = pinned_batches(torch, lambda i: torch.randn(64, 3, 224, 224, generator=gen))
    labels = pinned_batches(torch, lambda i: torch.randint(0, 1000, (64,), generator=gen))

    def step(i):
        x = images[i % 4].to("cuda", non_blocking=True).to(memory_format=torch.channels_last)
        y = labels[i % 4].to("cuda", non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def resnet50(torch, quick):
    return step_workload(torch, resnet50_step(torch), 5, 10 if quick else 30)


def gpt2(torch, quick):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = GPT2LMHeadModel(GPT2Config()).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(2)
    tokens = pinned_batches(torch, lambda i: torch.randint(0, model.config.vocab_size, (8, 1024), generator=gen))

    def step(i):
        ids = tokens[i % 4].to("cuda", non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step_workload(torch, step, 3, 6 if quick else 15)


def resnet18(torch, quick):
    """Small-batch inference, where the CPU's per-op cost (allocation included) sets the pace."""
    import torchvision
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = torchvision.models.resnet18(weights=None).eval()
    inputs = pinned_batches(torch, lambda i: torch.randn(1, 3, 224, 224))
    iters, reps = (20, 3) if quick else (50, 5)
    with torch.inference_mode():
        for i in range(50):
            model(inputs[i % 4].to("cuda", non_blocking=True))
        torch.cuda.synchronize()
        allocs = Allocations(torch)
        a0, t0, times = allocs(), timed_counters(), []
        for _ in range(reps):
            start = time.perf_counter()
            for i in range(iters):
                model(inputs[i % 4].to("cuda", non_blocking=True))
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1e3 / iters)
    return {"value": statistics.median(times), "spread": [min(times), max(times)],
            "allocs_per_unit": (allocs() - a0) / (iters * reps), "timed": timed_delta(t0),
            "mem_in_use_gib": memory_in_use_gib(torch)}


def empty(torch, quick):
    n, pairs, reps = 1 << 20, (5000 if quick else 20000), 5
    for _ in range(5000):
        x = torch.empty(n, device="cuda")
        del x
    allocs = Allocations(torch)
    a0, t0, times = allocs(), timed_counters(), []
    for _ in range(reps):
        start = time.perf_counter_ns()
        for _ in range(pairs):
            x = torch.empty(n, device="cuda")
            del x
        times.append((time.perf_counter_ns() - start) / pairs)
    return {"value": statistics.median(times), "spread": [min(times), max(times)],
            "allocs_per_unit": (allocs() - a0) / (pairs * reps), "timed": timed_delta(t0)}


def run(args):
    out = {"variant": args.label or args.variant, "pid": os.getpid(), "workloads": {}}
    try:
        torch = install(args.variant)
        out["gpu"] = torch.cuda.get_device_name(0)
        out["torch"] = torch.__version__
    except Exception as e:  # noqa: BLE001 (every failure goes into the JSON)
        out["error"] = "%s: %s" % (type(e).__name__, e)
        return finish(args, out, 1)
    if args.variant == "pytorch_history":
        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="all", max_entries=100_000)
    for name in args.workloads.split(","):
        start = time.perf_counter()
        try:
            rec = globals()[name](torch, args.quick)
            rec["status"] = "ok"
            rec["seconds"] = round(time.perf_counter() - start, 1)
        except ImportError as e:
            rec = {"status": "skip", "reason": "import failed: %s" % e}
        except Exception as e:  # noqa: BLE001
            rec = {"status": "error", "error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "-")}
        out["workloads"][name] = rec
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    if args.variant in CAPTURE_MODES or args.variant.startswith("timed_"):
        import tracepool
        capture = json.loads(tracepool.report(format="json")).get("capture", {})
        out["capture"] = {k: capture.get(k) for k in ("mode", "unwinder", "sites", "cfi_slow_stacks",
                                                      "cfi_walks_replayed", "cfi_walks_taken")}
    return finish(args, out, 0)


def finish(args, out, rc):
    with open(args.out, "w") as f:
        json.dump(out, f)
    print(json.dumps(out), flush=True)
    return rc


# ---- report: no torch from here on ---------------------------------------------------------------
def load(d):
    """{variant: [process record, ...]} from DIR/capture.*.json, in the order the processes ran."""
    runs = {}
    names = sorted((n for n in os.listdir(d) if n.startswith("capture.") and n.endswith(".json")),
                   key=lambda n: os.path.getmtime(os.path.join(d, n)))
    for name in names:
        try:
            with open(os.path.join(d, name)) as f:
                rec = json.load(f)
        except (OSError, ValueError) as e:
            rec = {"variant": name.split(".")[1], "error": "unreadable: %s" % e}
        runs.setdefault(rec.get("variant", "?"), []).append(rec)
    return runs


def rounds_of(runs, variant, workload):
    """The variant's records of `workload` that succeeded, one per process, and the first failure."""
    ok, failure = [], None
    for rec in runs.get(variant, []):
        w = rec.get("workloads", {}).get(workload)
        if rec.get("error"):
            failure = failure or rec["error"]
        elif w is None:
            failure = failure or "no result (the process did not get that far)"
        elif w["status"] == "ok":
            ok.append(w)
        elif w["status"] == "error":
            failure = failure or w["error"]
        else:
            failure = failure or w.get("reason", "skipped")
    return ok, failure


def fmt(value, unit):
    return ("%.0f" if unit == "ns" else "%.2f") % value


def step_row(runs, workload):
    """One row per workload: each variant's median over its rounds, its ratio to pytorch's (the target
    is on this one), and the range and median of the per-round ratios (round k of a variant against
    round k of pytorch, which ran minutes apart at most)."""
    unit, target = UNITS[workload], TARGETS[workload]
    name = "capture bench: %s, %s" % (LABELS[workload], "ns per pair" if unit == "ns" else unit)
    base, failure = rounds_of(runs, "pytorch", workload)
    if not base:
        return "%s|%s|pytorch: %s" % ("SKIP" if failure and "import failed" in failure else "FAIL", name, failure)
    base_values = [r["value"] for r in base]
    base_median = statistics.median(base_values)
    parts = ["pytorch %s (%s-%s, %d rounds)" % (fmt(base_median, unit), fmt(min(base_values), unit),
                                                 fmt(max(base_values), unit), len(base))]
    verdict = "info"
    for variant in ("off", "python", "native", "all", "pytorch_history"):
        recs, failure = rounds_of(runs, variant, workload)
        if not recs:
            if variant in runs:
                parts.append("%s: %s" % (variant, failure))
                if variant == "all":
                    verdict = "FAIL"
            continue
        values = [r["value"] for r in recs]
        ratio = statistics.median(values) / base_median
        paired = [v / b for v, b in zip(values, base_values)]
        parts.append("%s %s %.3fx [rounds %.3f-%.3f, median %.3f]" % (
            variant, fmt(statistics.median(values), unit), ratio, min(paired), max(paired), statistics.median(paired)))
        if variant == "all" and target is not None:
            verdict = "meets" if ratio <= target else "misses"
    allocs = base[0].get("allocs_per_unit")
    tail = "; %.0f allocations per %s" % (allocs, "pair" if unit == "ns" else "step" if workload != "resnet18"
                                          else "iteration") if allocs else ""
    goal = " (target: all <= %.2fx)" % target if target else ""
    return "%s|%s|%s%s%s" % (verdict, name, "; ".join(parts), tail, goal)


def capture_cost_row(runs):
    """From the timed processes: µs per allocation spent inside tracepool, each mode minus capture:off."""
    name = "capture bench: us per allocation spent capturing (timed shim)"
    parts, verdict = [], "info"
    for workload in WORKLOADS:
        per = {}
        for mode in CAPTURE_MODES:
            recs, failure = rounds_of(runs, "timed_" + mode, workload)
            timed = [r["timed"] for r in recs if r.get("timed") and r["timed"]["allocs"]]
            if timed:  # ns inside tracepool (allocations and their frees) per allocation
                per[mode] = statistics.median(t["ns"] / t["allocs"] for t in timed)
        if "off" not in per or "all" not in per:
            continue
        added = {m: (per[m] - per["off"]) / 1e3 for m in CAPTURE_MODES if m in per and m != "off"}
        others = ", ".join("%s %+.3f" % (m, added[m]) for m in ("python", "native") if m in added)
        parts.append("%s: all %+.3f%s; inside tracepool with capture:off %.3f" % (
            workload, added["all"], " (%s)" % others if others else "", per["off"] / 1e3))
        if workload in ("resnet50", "gpt2", "resnet18"):
            if added["all"] > CAPTURE_TARGET_US:
                verdict = "misses"
            elif verdict == "info":
                verdict = "meets"
    if not parts:
        return "FAIL|%s|no timed process measured both capture:off and capture:all" % name
    return "%s|%s|%s (target: all <= %.1f us)" % (verdict, name, "; ".join(parts), CAPTURE_TARGET_US)


def memory_row(runs, workload):
    name = "capture bench: %s, device memory in use GiB" % LABELS[workload]
    base, failure = rounds_of(runs, "pytorch", workload)
    if not base or "mem_in_use_gib" not in base[0]:
        return None
    parts, worse = ["pytorch %.2f" % base[0]["mem_in_use_gib"]], False
    for variant in ("off", "all"):
        recs, _ = rounds_of(runs, variant, workload)
        if recs:
            parts.append("%s %.2f" % (variant, recs[0]["mem_in_use_gib"]))
            worse |= recs[0]["mem_in_use_gib"] > base[0]["mem_in_use_gib"] + 0.01
    return "%s|%s|%s (target <= pytorch)" % ("misses" if worse else "meets", name, ", ".join(parts))


def walks_row(runs):
    """How often the default's captures re-read a remembered walk (cfi) instead of walking."""
    recs = [r.get("capture") for r in runs.get("all", []) if r.get("capture")]
    if not recs:
        return None
    c = recs[-1]
    replayed, taken = c.get("cfi_walks_replayed") or 0, c.get("cfi_walks_taken") or 0
    share = replayed / (replayed + taken) if replayed + taken else 0
    return "info|capture bench: remembered walks (capture:all, one process)|%s unwinder; %d captures re-read a " \
           "remembered walk, %d walked (%.1f%% replayed); %s sites; %s stacks left to boost" % (
               c.get("unwinder"), replayed, taken, 100 * share, c.get("sites"), c.get("cfi_slow_stacks"))


def report(d):
    if not os.path.isdir(d):
        print("FAIL|capture bench|no such directory: %s" % d)
        return 0
    runs = load(d)
    if not runs:
        print("FAIL|capture bench|no capture.*.json in %s" % d)
        return 0
    for workload in WORKLOADS:
        print(step_row(runs, workload))
    print(capture_cost_row(runs))
    for workload in ("resnet50", "gpt2"):
        row = memory_row(runs, workload)
        if row:
            print(row)
    row = walks_row(runs)
    if row:
        print(row)
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "report":
        try:
            return report(sys.argv[2])
        except Exception as e:  # noqa: BLE001 (rows printed so far stand)
            print("FAIL|capture bench|capture_bench.py report crashed: %s: %s" % (type(e).__name__, e))
            return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("variant", choices=VARIANTS)
    r.add_argument("--out", required=True)
    r.add_argument("--workloads", default=",".join(WORKLOADS))
    r.add_argument("--quick", action="store_true", help="fewer steps (a short budget)")
    r.add_argument("--label", default="", help="the name the report gives this process's variant")
    args = p.parse_args()
    unknown = [w for w in args.workloads.split(",") if w not in WORKLOADS]
    if unknown:
        p.error("unknown workload(s): %s" % ", ".join(unknown))
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
