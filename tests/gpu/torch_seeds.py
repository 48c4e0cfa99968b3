"""The seed questions (../shared/seeds) and the torch.cuda memory API, asked of tracepool.torch on the
GPU machine; tests/gpu/run.sh runs each scenario as its own process.

    torch_seeds.py SCENARIO     installs tracepool (tracepool.torch.install(); pool: a MemPool instead),
                                runs the scenario and prints {"seed": SCENARIO, "rows": [[STATUS, step,
                                detail], ...]} as its last line
    torch_seeds.py report DIR   (no torch) DIR/seed.<scenario>.out and .rc -> "STATUS|step|detail" lines

Every leak a scenario makes is made on a line that ends in a marker comment, "# <name>"; a check
finds that line in this file and asks tracepool's JSON report (docs/report-schema.md) for the call
site whose innermost Python frame is exactly it (for memory allocated during backward, a borrowed
frame), so a report that names another line, or none, fails. Marks cut the scenarios into epochs; a
site that leaks every epoch must come out GROWING.
"""
import gc
import json
import os
import pickle
import pickletools
import sys
import tempfile
import traceback
import warnings

MiB = 1 << 20
EPOCHS = 4
SOURCE = os.path.realpath(__file__)


# ---- Reading a report ----------------------------------------------------------------------------
def line_of(name):
    """The line of this file that ends in the marker comment for `name`."""
    marker = "# <" + name + ">"
    with open(SOURCE) as f:
        hits = [n for n, text in enumerate(f, 1) if text.rstrip().endswith(marker)]
    if len(hits) != 1:
        raise AssertionError("marker %s found %d times" % (marker, len(hits)))
    return hits[0]


def is_line(frame, line):
    return (frame is not None and frame.get("kind") == "python" and frame.get("line") == line
            and bool(frame.get("file")) and os.path.realpath(frame["file"]) == SOURCE)


def innermost_python(site):
    return next((f for f in site.get("frames", []) if f.get("kind") == "python"), None)


def sites_at(sites, marker):
    """The sites whose innermost Python frame is the marker's line."""
    line = line_of(marker)
    return [s for s in sites if is_line(innermost_python(s), line)]


def where(site):
    f = innermost_python(site)
    if f is None:
        first = (site.get("frames") or [{}])[0]
        return "no Python frame (first: %s)" % first.get("function", "none")
    return "%s:%s%s" % (os.path.basename(f.get("file") or "?"), f.get("line"), " [borrowed]" if f.get("borrowed") else "")


def top(sites, n=3):
    return ", ".join("%s %s" % (mib(s.get("bytes", 0)), where(s)) for s in sites[:n]) or "none"


def mib(n):
    """Bytes for people: 80 B, 4.0 KiB, 64.00 MiB."""
    if n < 1024:
        return "%d B" % n
    return "%.1f KiB" % (n / 1024) if n < MiB else "%.2f MiB" % (n / MiB)


def report_now():
    import tracepool

    return json.loads(tracepool.report("json"))


def marker_name(marker):
    return "%s:%d" % (os.path.basename(SOURCE), line_of(marker))


def growing_row(step, sites, marker, min_bytes, also=None):
    """PASS when the marker's line holds at least min_bytes and is flagged growing across the marks."""
    found = sites_at(sites, marker)
    if not found:
        return ["FAIL", step, "no leak site names %s; top sites: %s" % (marker_name(marker), top(sites))]
    held = sum(s.get("bytes", 0) for s in found)
    blocks = sum(s.get("blocks", 0) for s in found)
    grow = [s for s in found if s.get("growing")]
    at_marks = [sum(v) for v in zip(*(s.get("live_at_marks", []) for s in found))]
    problems = []
    if held < min_bytes:
        problems.append("holds %s < %s expected" % (mib(held), mib(min_bytes)))
    if not grow:
        problems.append("not flagged growing")
    if also:
        problems += [p for p in (check(found) for check in also) if p]
    detail = "%s holds %s in %d blocks across %d sites, live at marks: %s%s" % (
        marker_name(marker), mib(held), blocks, len(found), " ".join(mib(v) for v in at_marks),
        ", GROWING" if grow else "")
    return ["FAIL" if problems else "PASS", step, ("; ".join(problems) + " -- " if problems else "") + detail]


def frames_include(marker):
    """A check for growing_row: some frame of the site (an outer one) is the marker's line."""
    line = line_of(marker)

    def check(found):
        if any(is_line(f, line) for s in found for f in s.get("frames", [])):
            return None
        return "caller line %s not among the frames" % marker_name(marker)
    return check


def tagged(label):
    def check(found):
        return None if any(label in s.get("tags", []) for s in found) else "tag %r missing" % label
    return check


# ---- Seed scenarios ------------------------------------------------------------------------------
def mlp(x, w1, w2):
    h = x.matmul(w1).tanh_()  # <hidden>
    return h.matmul(w2)  # <output>


def weights(torch, generator):
    w1 = torch.randn(512, 1024, device="cuda", generator=generator).mul_(0.03).requires_grad_()
    w2 = torch.randn(1024, 1024, device="cuda", generator=generator).mul_(0.03).requires_grad_()
    return w1, w2


def sgd(torch, params):
    with torch.no_grad():
        for w in params:
            w.sub_(w.grad, alpha=0.01)
            w.grad = None


def seed_validation_outputs(torch):
    """Seed 000: "Why is GPU memory occupied after validation completes?" The loop keeps every
    validation output in a list (4 MiB each, 4 per epoch)."""
    import tracepool

    g = torch.Generator(device="cuda").manual_seed(0)
    w1, w2 = weights(torch, g)
    x = torch.randn(1024, 512, device="cuda", generator=g)
    y = torch.randn(1024, 1024, device="cuda", generator=g)
    outputs = []
    for epoch in range(EPOCHS):
        for _ in range(3):
            mlp(x, w1, w2).sub(y).pow(2).mean().backward()
            sgd(torch, (w1, w2))
        with tracepool.tag("validation"), torch.no_grad():
            for _ in range(4):
                outputs.append(mlp(x, w1, w2))  # <keep-outputs>
        tracepool.mark("epoch %d" % epoch)
    leaks = report_now()["leaks"]
    return [growing_row("seed: validation outputs kept", leaks, "output", EPOCHS * 4 * 4 * MiB,
                        also=[frames_include("keep-outputs"), tagged("validation")])]


def seed_losses_append(torch):
    """Seed 004: `losses.append(loss)` keeps every step's loss tensor; an evaluation loss computed
    with autograd on also keeps its graph, i.e. the activations saved for a backward never run."""
    import tracepool

    g = torch.Generator(device="cuda").manual_seed(1)
    w1, w2 = weights(torch, g)
    x = torch.randn(1024, 512, device="cuda", generator=g)
    y = torch.randn(1024, 1024, device="cuda", generator=g)
    losses, eval_losses = [], []
    for epoch in range(EPOCHS):
        for _ in range(5):
            loss = mlp(x, w1, w2).sub(y).pow(2).mean()  # <train-loss>
            loss.backward()
            sgd(torch, (w1, w2))
            losses.append(loss)
        eval_losses.append(mlp(x, w1, w2).sub(y).pow(2).mean())  # <eval-loss>
        tracepool.mark("epoch %d" % epoch)
    leaks = report_now()["leaks"]
    return [growing_row("seed: losses.append(loss)", leaks, "train-loss", EPOCHS * 5 * 4),
            growing_row("seed: eval loss keeps its graph", leaks, "hidden", EPOCHS * 4 * MiB,
                        also=[frames_include("eval-loss")])]


def make_logger(stats):
    return lambda: float(stats.float().mean())  # the closure keeps `stats` alive


def seed_closure(torch):
    """Seed 004, "ghost tensors": callbacks kept in a list, each closing over a tensor."""
    import tracepool

    g = torch.Generator(device="cuda").manual_seed(2)
    proj = torch.randn(1024, 256, device="cuda", generator=g)
    callbacks = []
    for epoch in range(EPOCHS):
        for _ in range(5):
            feats = torch.randn(256, 1024, device="cuda", generator=g)
            stats = feats.matmul(proj).relu_()  # <closure-stats>
            callbacks.append(make_logger(stats))
        tracepool.mark("epoch %d" % epoch)
    leaks = report_now()["leaks"]
    return [growing_row("seed: closure holds tensors", leaks, "closure-stats", EPOCHS * 5 * 256 * 256 * 4)]


def seed_freed_cached(torch):
    """Seeds 001 and 003: memory freed by the program but kept by the cache, which nvidia-smi shows
    and users take for a leak. Its bytes must be reported cached, by the line that used them, and
    never as leaked; empty_cache gives them back."""
    held = torch.ones(8 * MiB, dtype=torch.uint8, device="cuda")  # <held>
    scratch = [torch.ones(32 * MiB, dtype=torch.uint8, device="cuda") for _ in range(4)]  # <scratch>
    total = sum(int(t.sum()) for t in scratch)
    del scratch
    torch.cuda.synchronize()
    doc = report_now()
    reserved, allocated = torch.cuda.memory_reserved(), torch.cuda.memory_allocated()
    leaked = sum(s.get("bytes", 0) for s in sites_at(doc["leaks"], "scratch"))
    cached = sum(s.get("bytes", 0) for s in sites_at(doc["cached"], "scratch"))
    held_bytes = sum(s.get("bytes", 0) for s in sites_at(doc["leaks"], "held"))
    problems = []
    if leaked:
        problems.append("%s of the freed line reported leaked" % mib(leaked))
    if cached < 128 * MiB:
        problems.append("cached by %s: %s < 128 MiB (cached sites: %s)" % (marker_name("scratch"), mib(cached),
                                                                            top(doc["cached"])))
    if held_bytes < 8 * MiB:
        problems.append("live line %s: %s < 8 MiB" % (marker_name("held"), mib(held_bytes)))
    if reserved - allocated < 128 * MiB:
        problems.append("memory_reserved - memory_allocated = %s" % mib(reserved - allocated))
    rows = [["FAIL" if problems else "PASS", "seed: freed memory is cached, not leaked",
             "; ".join(problems) or "%s: 0 B leaked, %s cached; %s live at %s; reserved %s, allocated %s (sum %d)" % (
                 marker_name("scratch"), mib(cached), mib(held_bytes), marker_name("held"), mib(reserved),
                 mib(allocated), total)]]
    torch.cuda.empty_cache()
    after = report_now()
    left = sum(s.get("bytes", 0) for s in sites_at(after["cached"], "scratch"))
    dropped = reserved - torch.cuda.memory_reserved()
    # Growable segments (CUDA's default) keep the free rest of the 20 MiB piece the live block is in.
    segments = (after.get("devices") or [{}])[0].get("segments", "classic")
    slack = 20 * MiB if segments == "growable" else 0
    ok = left <= slack and dropped + slack >= 128 * MiB
    rows.append(["PASS" if ok else "FAIL", "seed: empty_cache returns cached memory",
                 "reserved fell by %s; %s still cached by %s; %s still live; %s segments%s" % (
                     mib(dropped), mib(left), marker_name("scratch"), mib(held.numel()), segments,
                     " (what stays lies in the live block's piece)" if slack else "")])
    return rows


# ---- torch.cuda's memory functions ------------------------------------------------------------------
def guarded(step, check):
    """Runs one check; any exception becomes its FAIL row."""
    try:
        return check()
    except Exception as e:  # noqa: BLE001 (every failure must become a row)
        return ["FAIL", step, "%s: %s" % (type(e).__name__, (str(e) or "-").splitlines()[0][:240])]


def check_stats_agree(torch, tracepool, held_bytes):
    step = "torch.cuda memory functions = tracepool"
    s = tracepool.stats()
    pairs = {"memory_allocated": (torch.cuda.memory_allocated(), "allocated_bytes.all.current"),
             "memory_reserved": (torch.cuda.memory_reserved(), "reserved_bytes.all.current"),
             "max_memory_allocated": (torch.cuda.max_memory_allocated(), "allocated_bytes.all.peak"),
             "max_memory_reserved": (torch.cuda.max_memory_reserved(), "reserved_bytes.all.peak")}
    flat = torch.cuda.memory_stats()
    summary = torch.cuda.memory_summary()
    accelerator = getattr(getattr(torch, "accelerator", None), "memory_allocated", None)
    accel = accelerator() if accelerator else None
    problems = ["%s %d != %s %d" % (name, v, key, s[key]) for name, (v, key) in pairs.items() if v != s[key]]
    common = sorted(set(flat) & set(s))
    problems += ["memory_stats()[%s] %s != %s" % (k, flat[k], s[k]) for k in common if flat[k] != s[k]][:3]
    if len(common) < 100:
        problems.append("only %d memory_stats keys in common with tracepool.stats()" % len(common))
    if pairs["memory_allocated"][0] < held_bytes:  # also: PyTorch and tracepool use one instance
        problems.append("memory_allocated %d < %d bytes of live tensors" % (pairs["memory_allocated"][0], held_bytes))
    if "PyTorch CUDA memory summary" not in summary:
        problems.append("memory_summary has no title")
    if accel is not None and accel != s["allocated_bytes.all.current"]:
        problems.append("torch.accelerator.memory_allocated %d" % accel)
    return ["FAIL" if problems else "PASS", step, "; ".join(problems) or
            "allocated %s, reserved %s, peaks %s / %s equal; %d memory_stats keys equal; memory_summary %d lines%s" % (
                mib(s["allocated_bytes.all.current"]), mib(s["reserved_bytes.all.current"]),
                mib(s["allocated_bytes.all.peak"]), mib(s["reserved_bytes.all.peak"]), len(common),
                summary.count("\n"), "; torch.accelerator too" if accel is not None else "")]


def check_resets(torch, tracepool):
    step = "torch.cuda reset_peak / reset_accumulated"
    big = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
    del big
    peak, current = torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated()
    problems = [] if peak >= current + 256 * MiB else ["peak %s before reset not above current + 256 MiB" % mib(peak)]
    torch.cuda.reset_peak_memory_stats()
    s = tracepool.stats()
    if not (torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated() == s["allocated_bytes.all.peak"]):
        problems.append("after reset_peak_memory_stats: max %d, current %d, tracepool peak %d" % (
            torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated(), s["allocated_bytes.all.peak"]))
    if torch.cuda.max_memory_reserved() != torch.cuda.memory_reserved():
        problems.append("max_memory_reserved %d != memory_reserved %d after reset" % (
            torch.cuda.max_memory_reserved(), torch.cuda.memory_reserved()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.cuda.reset_max_memory_allocated()
    torch.cuda.reset_accumulated_memory_stats()
    totals = (torch.cuda.memory_stats()["allocation.all.allocated"], tracepool.stats()["allocation.all.allocated"])
    if totals != (0, 0):
        problems.append("allocation.all.allocated after reset_accumulated_memory_stats: torch %d, tracepool %d" % totals)
    return ["FAIL" if problems else "PASS", step, "; ".join(problems) or
            "peak %s -> %s after reset; accumulated totals zeroed" % (mib(peak), mib(torch.cuda.max_memory_allocated()))]


def check_empty_cache(torch, tracepool):
    step = "torch.cuda.empty_cache"
    temp = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
    del temp
    before = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    after = torch.cuda.memory_reserved()
    ok = before - after >= 64 * MiB and after == tracepool.stats()["reserved_bytes.all.current"]
    return ["PASS" if ok else "FAIL", step, "memory_reserved %s -> %s (tracepool %s)" % (
        mib(before), mib(after), mib(tracepool.stats()["reserved_bytes.all.current"]))]


def check_memory_fraction(torch, tracepool):
    step = "torch.cuda memory fraction"
    total = torch.cuda.get_device_properties(0).total_memory
    f0 = torch.cuda.get_per_process_memory_fraction()
    torch.cuda.set_per_process_memory_fraction(0.5)
    f1, limit = torch.cuda.get_per_process_memory_fraction(), tracepool.stats()["limit_bytes"]
    torch.cuda.set_per_process_memory_fraction(1.0)
    f2, limit_after = torch.cuda.get_per_process_memory_fraction(), tracepool.stats()["limit_bytes"]
    ok = (f0, f1, f2) == (1.0, 0.5, 1.0) and 0 < limit < total
    return ["PASS" if ok else "FAIL", step, "get: %s, %s after set(0.5), %s after set(1.0); tracepool limit_bytes "
            "%s (%.2f of the device) at 0.5, %s at 1.0" % (f0, f1, f2, mib(limit), limit / total, mib(limit_after))]


def check_record_stream(torch, tracepool):
    """A block used on a side stream and freed on its own must not be handed out again before the
    side stream is done with it: the side stream sums it 20 times while the main stream reallocates
    and zeroes the same size at once."""
    step = "Tensor.record_stream"
    side = torch.cuda.Stream()
    x = torch.ones(64 * MiB, dtype=torch.uint8, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        acc = torch.zeros(64 * MiB, dtype=torch.uint8, device="cuda")
        for _ in range(20):
            acc.add_(x)
    x.record_stream(side)
    old = x.data_ptr()
    del x
    z = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda").zero_()
    reused = z.data_ptr() == old
    torch.cuda.synchronize()
    lo, hi = int(acc.min()), int(acc.max())
    invalid = tracepool.stats()["num_invalid_frees"]
    ok = lo == hi == 20 and invalid == 0
    return ["PASS" if ok else "FAIL", step, "side stream read %d..%d (20 expected) while the main stream %s the "
            "freed block; %d invalid frees" % (lo, hi, "got" if reused else "did not get", invalid)]


def check_snapshots(torch, tracepool, held_marker):
    """torch.cuda's snapshot functions, and dump_snapshot's pickle read by torch.cuda._memory_viz."""
    import tracepool.torch
    from tracepool.torch.memory_viz import VIEWER_OPCODES
    from torch.cuda import _memory_viz

    step = "snapshot: memory_viz reads dump_snapshot"
    segments = torch.cuda.memory_snapshot()
    snap = torch.cuda.memory._snapshot()
    with tempfile.TemporaryDirectory() as d:
        torch.cuda.memory._dump_snapshot(os.path.join(d, "torch.pickle"))
        with open(os.path.join(d, "torch.pickle"), "rb") as f:
            _memory_viz.segsum(pickle.load(f))
        path = os.path.join(d, "tracepool.pickle")
        tracepool.torch.dump_snapshot(path)
        with open(path, "rb") as f:
            raw = f.read()
    data = pickle.loads(raw)
    ops = {op.name for op, _, _ in pickletools.genops(raw)}
    # Every reader of torch.cuda._memory_viz (the flamegraph views with the identity for flamegraph.pl,
    # a download); each returns text, which must not be empty.
    flat = lambda lines: lines  # noqa: E731
    views = {"segsum": _memory_viz.segsum(data), "trace": _memory_viz.trace(data),
             "trace_plot": _memory_viz.trace_plot(data), "segment_plot": _memory_viz.segment_plot(data),
             "segments": _memory_viz.segments(data, format_flamegraph=flat),
             "memory": _memory_viz.memory(data, format_flamegraph=flat)}
    line = line_of(held_marker)
    named = sum(1 for s in data["segments"] for b in s["blocks"] if b["state"] == "active_allocated"
                and any(f["line"] == line and os.path.realpath(f["filename"]) == SOURCE for f in b["frames"]))
    problems = []
    if raw[:2] != b"\x80\x04":
        problems.append("pickle starts %r, not protocol 4" % raw[:2])
    if not ops <= VIEWER_OPCODES:
        problems.append("opcodes the viewer lacks: %s" % sorted(ops - VIEWER_OPCODES))
    if not segments or set(snap) < {"segments", "device_traces"}:
        problems.append("memory_snapshot() %d segments, _snapshot() keys %s" % (len(segments), sorted(snap)))
    if not named:
        problems.append("no live block's frames name %s" % marker_name(held_marker))
    problems += ["_memory_viz.%s returned nothing" % name for name, text in views.items() if not text]
    return ["FAIL" if problems else "PASS", step, "; ".join(problems) or
            "%d segments, %d trace events, %.0f KiB pickle (protocol 4, %d opcode kinds); %s read it; %d blocks name"
            " %s; torch's memory_snapshot, _snapshot, _dump_snapshot work" % (
                len(data["segments"]), sum(map(len, data["device_traces"])), len(raw) / 1024, len(ops),
                ", ".join(views), named, marker_name(held_marker))]


def scenario_api(torch):
    import tracepool

    held = [torch.ones(n, dtype=torch.uint8, device="cuda") for n in (1000, 3 * MiB, 40 * MiB)]  # <api-held>
    torch.cuda.synchronize()
    rows = [guarded("torch.cuda memory functions = tracepool",
                    lambda: check_stats_agree(torch, tracepool, sum(t.numel() for t in held)))]
    rows.append(guarded("torch.cuda reset_peak / reset_accumulated", lambda: check_resets(torch, tracepool)))
    rows.append(guarded("torch.cuda.empty_cache", lambda: check_empty_cache(torch, tracepool)))
    rows.append(guarded("torch.cuda memory fraction", lambda: check_memory_fraction(torch, tracepool)))
    rows.append(guarded("Tensor.record_stream", lambda: check_record_stream(torch, tracepool)))
    rows.append(guarded("snapshot: memory_viz reads dump_snapshot", lambda: check_snapshots(torch, tracepool, "api-held")))
    return rows


def scenario_oom(torch):
    """An allocation larger than the device: torch.cuda.OutOfMemoryError, naming the line that holds
    the most memory; the allocator goes on working afterwards."""
    import tracepool.torch

    step = "OOM: torch.cuda.OutOfMemoryError names the holder"
    shim = tracepool.torch._installed.get("torch_lib")
    hold = torch.ones(2048 * MiB, dtype=torch.uint8, device="cuda")  # <oom-holder>
    try:
        t = torch.empty(200 << 30, dtype=torch.uint8, device="cuda")
        return [["FAIL", step, "no exception; the tensor's data_ptr is %#x%s" % (
            t.data_ptr(), "" if shim else " (libtracepool_torch.so not built: PyTorch got a null pointer)")]]
    except torch.cuda.OutOfMemoryError as e:
        message = str(e)
    except RuntimeError as e:
        return [["FAIL", step, "RuntimeError, not OutOfMemoryError (%s): %s" % (
            "allocator class %s" % os.path.basename(shim) if shim else "libtracepool_torch.so not built", str(e).splitlines()[0][:200])]]
    after = torch.ones(MiB, dtype=torch.uint8, device="cuda")
    ooms = torch.cuda.memory_stats()["num_ooms"]
    holder = marker_name("oom-holder")
    problems = [] if holder in message else ["message does not name %s" % holder]
    if not message.startswith("CUDA out of memory. Tried to allocate"):
        problems.append("message does not start with PyTorch's sentence")
    if ooms < 1:
        problems.append("num_ooms %d" % ooms)
    # The message's first sentence, and its line that names the holder.
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    shown = [lines[0].split(". ")[0]] + [line for line in lines[1:] if holder in line][:1] if lines else []
    return [["FAIL" if problems else "PASS", step, "%s%s holding %s; then %s allocated fine, num_ooms %d. "
             "Message: %s" % ("; ".join(problems + [""]), holder, mib(hold.numel()), mib(after.numel()), ooms,
                              " / ".join(shown)[:400])]]


def scenario_backward(torch):
    """Allocations of the autograd engine's threads (gradients) carry the frames of the line that
    called backward() or torch.autograd.grad(), flagged borrowed."""
    g = torch.Generator(device="cuda").manual_seed(3)
    w1, w2 = weights(torch, g)
    x = torch.randn(1024, 512, device="cuda", generator=g)
    loss = mlp(x, w1, w2).pow(2).mean()
    loss.backward()  # <backward-call>
    (grad_w1,) = torch.autograd.grad(mlp(x, w1, w2).pow(2).mean(), [w1])  # <grad-call>
    leaks = report_now()["leaks"]
    rows = []
    for step, marker, tensor in (("backward(): borrowed frames", "backward-call", w2.grad),
                                 ("autograd.grad(): borrowed frames", "grad-call", grad_w1)):
        # The borrowed frames are the caller's whole stack, from the frame that lent them (inside
        # tracepool.torch and torch.autograd) out; the user's line is one of them.
        line = line_of(marker)
        borrowed = [s for s in leaks if any(is_line(f, line) and f.get("borrowed") for f in s.get("frames", []))]
        held = sum(s.get("bytes", 0) for s in borrowed)
        size = tensor.numel() * tensor.element_size()
        ok = bool(borrowed) and held >= size
        rows.append(["PASS" if ok else "FAIL", step, "%d sites hold %s with a borrowed frame at %s (gradient: %s); "
                     "innermost Python frames: %s" % (len(borrowed), mib(held), marker_name(marker), mib(size),
                                                      top(borrowed or leaks))])
    return rows


def scenario_pool(torch):
    """tracepool.torch.pool(): a MemPool on tracepool, used after CUDA is initialised; PyTorch's own
    statistics keep working and tracepool sees the pool's segment."""
    import tracepool
    import tracepool.torch

    step = "MemPool: tracepool.torch.pool()"
    torch.cuda.init()
    global _pool  # kept until exit: the pool is destroyed at interpreter teardown, as in a real program
    _pool = tracepool.torch.pool()
    with torch.cuda.use_mem_pool(_pool):
        x = torch.ones(4 * MiB, dtype=torch.uint8, device="cuda")  # <pool-alloc>
    torch.cuda.synchronize()
    reserved = tracepool.stats()["reserved_bytes.all.current"]
    native = torch.cuda.memory_allocated()
    leaks = report_now()["leaks"]
    grew = sum(s.get("bytes", 0) for s in sites_at(leaks, "pool-alloc"))
    ok = reserved >= 4 * MiB and native >= 4 * MiB and grew >= 4 * MiB and int(x.sum()) == 4 * MiB
    return [["PASS" if ok else "FAIL", step, "tracepool reserved %s for the pool, %s of it asked by %s; torch's own "
             "memory_allocated %s" % (mib(reserved), mib(grew), marker_name("pool-alloc"), mib(native))]]


SCENARIOS = {"validation_outputs": seed_validation_outputs, "losses_append": seed_losses_append,
             "closure": seed_closure, "freed_cached": seed_freed_cached, "api": scenario_api,
             "oom": scenario_oom, "backward": scenario_backward, "pool": scenario_pool}


def run(name):
    rows = []
    try:
        import tracepool.torch

        if name != "pool":
            tracepool.torch.install()
        import torch

        rows = SCENARIOS[name](torch)
        gc.collect()
    except Exception as e:  # noqa: BLE001 (every failure must become a row)
        traceback.print_exc()
        rows.append(["FAIL", "scenario " + name, "%s: %s" % (type(e).__name__, (str(e) or "-").splitlines()[0][:240])])
    print(json.dumps({"seed": name, "rows": rows}), flush=True)
    return 0


# ---- report: no torch from here on -------------------------------------------------------------
def report(d):
    for name in SCENARIOS:
        base = os.path.join(d, "seed." + name)
        rows, rc = None, None
        try:
            with open(base + ".out", errors="replace") as f:
                for line in f:
                    if line.startswith('{"seed"'):
                        rows = json.loads(line)["rows"]
            with open(base + ".rc") as f:
                rc = int(f.read().strip() or 0)
        except (OSError, ValueError) as e:
            print("FAIL|scenario %s|no result: %s" % (name, e))
            continue
        if rc == 124:
            print("FAIL|scenario %s|timed out (see torch.log)" % name)
            continue
        for status, step, detail in rows or []:
            print("%s|%s|%s" % (status, step, detail.replace("|", "/")))
        if rows is None:
            print("FAIL|scenario %s|exit status %d, no result line (see torch.log)" % (name, rc))
        elif rc != 0:
            print("FAIL|scenario %s|exit status %d after its checks (see torch.log)" % (name, rc))
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "report":
        try:
            return report(sys.argv[2])
        except Exception as e:  # noqa: BLE001
            print("FAIL|torch seeds report|crashed: %s: %s" % (type(e).__name__, e))
            return 0
    if len(sys.argv) != 2 or sys.argv[1] not in SCENARIOS:
        print(__doc__ + "\nscenarios: " + ", ".join(SCENARIOS), file=sys.stderr)
        return 2
    return run(sys.argv[1])


if __name__ == "__main__":
    sys.exit(main())
