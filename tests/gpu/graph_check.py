"""CUDA graphs, torch.compile(mode="reduce-overhead"), MemPool and OOM observers under tracepool,
each against PyTorch's own allocator; tests/gpu/run.sh runs it, one process per allocator.

    graph_check.py run --allocator native|tracepool [--checks a,b] [--bench] --out FILE.json
    graph_check.py compare NATIVE.json [NATIVE.json ...] -- TRACEPOOL.json [TRACEPOOL.json ...]

`run` prints nothing of interest; it writes {"allocator", "checks": {name: {"status", "result",
"detail"}}, "bench": {name: [us per step, one per repetition]}}. Every check is seeded, so both
allocators compute the same numbers: `compare` requires equal results (same kernels on the same
inputs: bitwise equal, up to 1e-6 where a kernel's reduction order may depend on addresses) and
prints "STATUS|step|detail" rows; the benchmark rows give tracepool's median time per step over
native's (runs interleaved by run.sh) with the spread of the per-round ratios.
"""
import faulthandler
import json
import os
import statistics
import sys
import time
import traceback

from check_cli import close, line_of, main

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, before torch loads it
faulthandler.enable()  # a crash prints the Python stack

# failed_capture last: under PyTorch's own allocator a failed capture leaves its pool's route open (its
# capture_end throws before endAllocateToPool), and a MemPool destroyed after that trips an internal
# assert (captures_underway.empty(), in synchronize_and_free_events): seen on the H200, torch 2.11.
CHECKS = ("linear_graph", "graphed_mlp_training", "shared_pool", "reduce_overhead", "tree_train_eval",
          "tree_shapes_kept", "mempool", "oom_observer", "report_pool", "capture_reuse", "failed_capture")


def seeded(torch, seed, *shape):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", generator=g)


def warm_up(torch, fn, *args):
    """PyTorch's advice before capturing: run a few times on a side stream (cuBLAS workspaces, lazy state)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)


def check_linear_graph(torch):
    """A linear layer captured once and replayed on fresh inputs; each replay equals eager."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(256, 256).cuda()
    static_in = seeded(torch, 1, 8, 256)
    warm_up(torch, lin, static_in)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = lin(static_in)
    sums = []
    for i in range(3):
        static_in.copy_(seeded(torch, 10 + i, 8, 256))
        g.replay()
        eager = lin(static_in)
        if not torch.equal(eager, static_out):
            raise AssertionError("replay %d differs from eager by %g" % (i, (eager - static_out).abs().max().item()))
        sums.append(static_out.double().sum().item())
    return sums, "3 replays equal eager"


def check_graphed_mlp_training(torch):
    """make_graphed_callables on an MLP, trained for 5 steps with AdamW on fresh batches."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda()
    graphed = torch.cuda.make_graphed_callables(model, (seeded(torch, 2, 16, 64).requires_grad_(False),))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for step in range(5):
        x, target = seeded(torch, 100 + step, 16, 64), seeded(torch, 200 + step, 16, 10)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(graphed(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, "losses %s" % ", ".join("%.5f" % v for v in losses)


def check_shared_pool(torch):
    """Two graphs sharing one pool (the second captured with pool=first.pool()), replayed in order."""
    x = seeded(torch, 3, 1024, 1024)
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    warm_up(torch, lambda t: (t * 2).sin(), x)
    with torch.cuda.graph(g1):
        a = (x * 2).sin()
    with torch.cuda.graph(g2, pool=g1.pool()):
        b = (a + 1).cos()
    sums = []
    for i in range(2):
        x.copy_(seeded(torch, 30 + i, 1024, 1024))
        g1.replay()
        g2.replay()
        expected = ((x * 2).sin() + 1).cos()
        if not torch.equal(expected, b):
            raise AssertionError("shared-pool replay %d differs from eager" % i)
        sums.append(b.double().sum().item())
    return sums, "2 replays of 2 graphs in one pool equal eager"


def check_failed_capture(torch, allocator):
    """A capture that fails (a synchronize inside it, after it allocated), then normal work: an
    allocation and matmul, random numbers, and a new capture. Each stage's outcome (a number, or the
    error's type) must be what PyTorch's allocator gives: tracepool adds no failure of its own."""
    x = seeded(torch, 4, 512, 512)
    g = torch.cuda.CUDAGraph()
    outcomes = []

    def stage(fn):
        try:
            outcomes.append(fn())
        except Exception as e:  # noqa: BLE001 - the outcome is compared, whatever it is
            outcomes.append("error: %s" % type(e).__name__)

    def capture_and_fail():
        with torch.cuda.graph(g):
            y = x @ x  # allocates inside the capture
            torch.cuda.synchronize()  # illegal during capture
            return (y + 1).sum().item()

    stage(capture_and_fail)
    stage(lambda: (x @ x.t()).double().sum().item())  # allocation and a kernel after the failure
    stage(lambda: torch.randn(256, 256, device="cuda", generator=torch.Generator("cuda").manual_seed(5))
          .double().sum().item())

    def new_capture():
        static = seeded(torch, 6, 256, 256)
        warm_up(torch, lambda t: t @ t, static)
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2):
            out = static @ static
        g2.replay()
        return out.double().sum().item()

    stage(new_capture)
    detail = "outcomes: %s" % ", ".join(o if isinstance(o, str) else "%.4g" % o for o in outcomes)
    if allocator == "tracepool":
        # tracepool's capture gate opened again (tracepool.torch ends a failed capture's route): the
        # cache goes back on empty_cache. PyTorch's own allocator keeps its default pool then.
        torch.cuda.synchronize()
        big = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        del big
        before = torch.cuda.memory_reserved()
        torch.cuda.empty_cache()
        returned = before - torch.cuda.memory_reserved()
        if returned < 256 << 20:
            raise AssertionError("after the failed capture empty_cache gave back only %d bytes (%s)" % (returned, detail))
        detail += "; then empty_cache gave back %d MiB" % (returned >> 20)
    return outcomes, detail


class _MLP:
    @staticmethod
    def make(torch, width=256):
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width),
                                   torch.nn.GELU(), torch.nn.Linear(width, 16)).cuda().eval()


def check_reduce_overhead(torch):
    """torch.compile(mode="reduce-overhead") (CUDA-graph trees) on a small MLP, fresh inputs each step."""
    model = _MLP.make(torch)
    compiled = torch.compile(model, mode="reduce-overhead")
    sums = []
    with torch.no_grad():
        for step in range(6):
            out = compiled(seeded(torch, 300 + step, 8, 256))
            sums.append(out.double().sum().item())
    expected = model(seeded(torch, 305, 8, 256)).double().sum().item()
    if abs(expected - sums[-1]) > 1e-3 * max(1.0, abs(expected)):
        raise AssertionError("compiled output %r differs from eager %r" % (sums[-1], expected))
    return sums, "6 steps (warmup, record, replays) equal eager within 1e-3"


def _tree_checkpoints(torch):
    """How many times torch.compile's CUDA-graph trees restored a pool checkpoint on this thread
    (setCheckpointPoolState, a second path through a tree); -1 where this torch does not say."""
    try:
        from torch._inductor import cudagraph_trees

        manager = cudagraph_trees.get_container(torch.cuda.current_device()).tree_manager
        return int(manager.debug_checkpointing_counter) if manager is not None else 0
    except (AttributeError, ImportError):
        return -1


def check_tree_train_eval(torch):
    """The most common loop there is: a small MLP compiled with reduce-overhead, trained with AdamW on
    fresh batches for 12 steps and evaluated through the same compiled model every third step under
    no_grad, keeping only Python floats. Evaluation is a second path through the CUDA-graph tree:
    the trees restore the pool's checkpoint (setCheckpointPoolState) before recording it."""
    F = torch.nn.functional
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 128),
                                torch.nn.GELU(), torch.nn.Linear(128, 1)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    compiled = torch.compile(model, mode="reduce-overhead")
    train, evals = [], []
    for step in range(12):
        model.train()
        loss = F.mse_loss(compiled(seeded(torch, 400 + step, 32, 64)), seeded(torch, 500 + step, 32, 1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        train.append(loss.item())
        if step % 3 == 2:
            model.eval()
            with torch.no_grad():
                evals.append(F.mse_loss(compiled(seeded(torch, 600 + step, 32, 64)), seeded(torch, 700 + step, 32, 1)).item())
    checkpoints = _tree_checkpoints(torch)
    return train + evals + [checkpoints], "%d training and %d evaluation losses; %d checkpoint restores" % (
        len(train), len(evals), checkpoints)


def check_tree_shapes_kept(torch):
    """Inference whose batch size varies while earlier outputs are kept alive: each new shape records a
    new graph beside live outputs of the others (a generation loop's pattern). Sums equal eager's."""
    model = _MLP.make(torch)
    compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)
    kept, sums, worst = [], [], 0.0
    with torch.no_grad():
        for i, batch in enumerate((8, 16, 8, 32, 16, 8, 32, 16)):
            x = seeded(torch, 800 + i, batch, 256)
            out = compiled(x)
            sums.append(out.double().sum().item())
            kept.append(out)
            expected = model(x).double().sum().item()
            worst = max(worst, abs(expected - sums[-1]) / max(1.0, abs(expected)))
    if worst > 1e-3:
        raise AssertionError("compiled outputs differ from eager by up to %.3g (relative)" % worst)
    checkpoints = _tree_checkpoints(torch)
    del kept
    return sums + [checkpoints], "8 batches of 3 shapes, outputs kept, equal eager within 1e-3; %d checkpoint restores" % checkpoints


def check_mempool(torch):
    """torch.cuda.MemPool() with use_mem_pool: use counts 1, 2 inside, 1 after; the tensor lies in
    the pool's snapshot; memory returns once tensor and pool are gone."""
    torch.cuda.empty_cache()
    reserved_before = torch.cuda.memory_reserved()
    pool = torch.cuda.MemPool()
    counts = [pool.use_count()]
    with torch.cuda.use_mem_pool(pool):
        t = seeded(torch, 7, 1 << 20)
        counts.append(pool.use_count())
    counts.append(pool.use_count())
    outside = torch.empty(1 << 20, device="cuda")
    in_pool = [s["address"] <= t.data_ptr() < s["address"] + s["total_size"] for s in pool.snapshot()]
    outside_in_pool = [s["address"] <= outside.data_ptr() < s["address"] + s["total_size"] for s in pool.snapshot()]
    value = t.double().sum().item()
    del t, outside
    del pool
    torch.cuda.empty_cache()
    back = torch.cuda.memory_reserved() - reserved_before
    if counts != [1, 2, 1] or not any(in_pool) or any(outside_in_pool) or back != 0:
        raise AssertionError("use counts %s, tensor in pool %s, other tensor in pool %s, %d bytes not returned"
                             % (counts, any(in_pool), any(outside_in_pool), back))
    return counts + [value], "use counts %s; tensor in the pool's snapshot, other tensor not; memory returned" % counts


def check_capture_reuse(torch):
    """graph_capture_record_stream_reuse:True over a long capture: 16 steps, each reading the step's
    1 MiB input on a side stream (record_stream) that joins back before the input is freed. With the
    option the graph reuses those blocks inside the capture, so the steps take a few addresses, not 16
    (Note [Reuse inside a capture] in core/stream_reuse.h); replays equal eager."""
    steps = 16

    def chain(x, acc, side):
        cur = x * 1.0
        addresses = set()
        for i in range(steps):
            nxt = cur * 0.5 + 1.0
            addresses.add(nxt.data_ptr())
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                acc[i].copy_(cur.sum())
            cur.record_stream(side)
            torch.cuda.current_stream().wait_stream(side)
            cur = nxt
        return cur, addresses

    settings = getattr(torch._C, "_accelerator_setAllocatorSettings", None) or torch.cuda.memory._set_allocator_settings
    settings("graph_capture_record_stream_reuse:True")
    try:
        side = torch.cuda.Stream()
        x = seeded(torch, 21, 1 << 18)
        acc = torch.zeros(steps, device="cuda")
        eager_out, _ = chain(x, acc, side)
        eager = acc.clone()
        warm_up(torch, lambda: chain(x, acc, side))
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out, addresses = chain(x, acc, side)
        acc.zero_()
        g.replay()
        torch.cuda.synchronize()
        if not torch.equal(acc, eager) or not torch.equal(out, eager_out):
            raise AssertionError("replay differs from eager by %g" % (acc - eager).abs().max().item())
        if len(addresses) > 4:
            raise AssertionError("%d steps took %d addresses: the side stream's blocks were not reused inside the "
                                 "capture" % (steps, len(addresses)))
        return [acc.double().sum().item(), len(addresses) <= 4], \
            "%d steps took %d addresses; replay equals eager" % (steps, len(addresses))
    finally:
        settings("graph_capture_record_stream_reuse:False")


def check_oom_observer(torch):
    """An OOM observer is told (device, size, total, free) and the error is torch.cuda.OutOfMemoryError
    starting with PyTorch's sentence."""
    told = []
    torch._C._cuda_attach_out_of_memory_observer(lambda *args: told.append(args))
    try:
        torch.empty(1 << 44, dtype=torch.uint8, device="cuda")
        raise AssertionError("16 TiB allocated")
    except torch.cuda.OutOfMemoryError as e:
        message = str(e)
    if len(told) != 1 or len(told[0]) != 4:
        raise AssertionError("observer told %r" % (told,))
    if not message.startswith("CUDA out of memory. Tried to allocate"):
        raise AssertionError("message: %s" % message[:200])
    after = torch.ones(1024, device="cuda").sum().item()
    return [len(told), told[0][1], after], "observer told once (size %d); %s" % (told[0][1], message.split(". GPU")[0])


def check_report_pool(torch, allocator):
    """tracepool's report shows a live graph's pool as its own group, named by the capture's line."""
    if allocator != "tracepool":
        return None, "tracepool only"
    import tracepool

    x = seeded(torch, 8, 1024, 1024)
    warm_up(torch, lambda t: t * 3, x)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):  # <graph-capture>
        y = x * 3 + 1
    report = json.loads(tracepool.report(format="json"))
    pools = report.get("pools")
    if not pools:
        raise AssertionError("no 'pools' group in the report")
    line = line_of(__file__, "<graph-capture>")
    named = [p for p in pools if any(f.get("line") == line and f.get("file", "").endswith("graph_check.py")
                                     for f in p.get("frames", []))]
    if not named:
        raise AssertionError("no pool named by graph_check.py:%d: %s" % (line, json.dumps(pools)[:300]))
    leaks = [s for s in report.get("leaks", []) if any(f.get("line") == line_of(__file__, "y = x * 3 + 1")
                                                          for f in s.get("frames", []))]
    if leaks:
        raise AssertionError("the graph's output is also among the leaks: %s" % json.dumps(leaks)[:300])
    del y, g
    return None, "pool group '%s', %d bytes, created at graph_check.py:%d; %d of its blocks among leaks" % (
        named[0].get("label"), named[0].get("bytes", 0), line, len(leaks))


# ---- Benchmark: replay allocates nothing, so tracepool must cost nothing -----------------------------

def bench_replay(torch, steps=3000, reps=5):
    """Small-batch inference replayed as a graph: copy a fresh batch in, replay. us per step."""
    model = _MLP.make(torch, 1024)
    batches = [seeded(torch, 400 + i, 8, 1024) for i in range(64)]
    static_in = batches[0].clone()
    with torch.no_grad():
        warm_up(torch, model, static_in)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            model(static_in)
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(steps):
            static_in.copy_(batches[i % 64])
            g.replay()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / steps * 1e6)
    return times


def bench_compiled(torch, steps=2000, reps=5):
    """reduce-overhead compiled inference on fresh batches (the compiled module copies them in). us per step."""
    model = _MLP.make(torch, 1024)
    compiled = torch.compile(model, mode="reduce-overhead")
    batches = [seeded(torch, 500 + i, 8, 1024) for i in range(64)]
    times = []
    with torch.no_grad():
        for i in range(5):
            compiled(batches[i])
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for i in range(steps):
                compiled(batches[i % 64])
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / steps * 1e6)
    return times


def run(args):
    if args.allocator == "tracepool":
        import tracepool.torch

        tracepool.torch.install(os.environ.get("TRACEPOOL_CONF"))
    import torch

    out = {"allocator": args.allocator, "backend": None, "checks": {}, "bench": {}}
    checks = [c for c in (args.checks.split(",") if args.checks else []) if c]
    for name in checks:
        try:
            fn = globals()["check_" + name]
            result, detail = fn(torch, args.allocator) if name in ("report_pool", "failed_capture") else fn(torch)
            out["checks"][name] = {"status": "ok", "result": result, "detail": detail}
        except Exception as e:  # noqa: BLE001 - a check's failure is its row
            out["checks"][name] = {"status": "error", "detail": "%s: %s" % (type(e).__name__, str(e)[:400]),
                                   "trace": traceback.format_exc()[-1500:]}
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    out["backend"] = torch.cuda.memory.get_allocator_backend()
    if args.bench:
        for name, fn in (("replay", bench_replay), ("compiled", bench_compiled)):
            try:
                out["bench"][name] = fn(torch)
            except Exception as e:  # noqa: BLE001
                out["bench"][name] = "error: %s: %s" % (type(e).__name__, str(e)[:300])
    with open(args.out, "w") as f:
        json.dump(out, f)


def compare(paths):
    split = paths.index("--")
    native = [json.load(open(p)) for p in paths[:split] if os.path.exists(p)]
    traced = [json.load(open(p)) for p in paths[split + 1:] if os.path.exists(p)]
    rows = []
    if not native or not traced:
        return [["FAIL", "CUDA graphs (graph_check.py)", "missing output: native %d, tracepool %d files"
                 % (len(native), len(traced))]]
    # The checks come from the first process of each allocator that ran any, the benchmarks from
    # every process that ran them.
    n0 = next((r["checks"] for r in native if r["checks"]), None)
    t0 = next((r["checks"] for r in traced if r["checks"]), None)
    if n0 is None or t0 is None:
        rows.append(["FAIL", "CUDA graphs (graph_check.py)", "no process ran the checks: native %s, tracepool %s"
                     % ("ran" if n0 else "none", "ran" if t0 else "none")])
        n0, t0 = n0 or {}, t0 or {}
    native = [r for r in native if r["bench"]]
    traced = [r for r in traced if r["bench"]]
    for name in CHECKS:
        if name not in t0:
            continue
        n, t = n0.get(name, {}), t0[name]
        step = "graphs: %s (tracepool vs native)" % name
        if t["status"] != "ok":
            rows.append(["FAIL", step, "tracepool: %s; native: %s" % (t["detail"], n.get("status"))])
        elif name == "report_pool":
            rows.append(["PASS", step, t["detail"]])
        elif n.get("status") != "ok":
            rows.append(["FAIL", step, "native failed (%s); tracepool: %s" % (n.get("detail"), t["detail"])])
        elif not close(n["result"], t["result"]):
            rows.append(["FAIL", step, "results differ: native %s, tracepool %s" % (n["result"], t["result"])])
        else:
            rows.append(["PASS", step, "equal results; " + t["detail"]])
    for name in ("replay", "compiled"):
        n_times = [x for r in native for x in (r["bench"].get(name) or []) if isinstance(x, float)]
        t_times = [x for r in traced for x in (r["bench"].get(name) or []) if isinstance(x, float)]
        step = "bench: %s inference, tracepool/native (target <= 1.02x)" % (
            "graph-replay" if name == "replay" else "reduce-overhead compiled")
        if not n_times or not t_times:
            errors = [r["bench"].get(name) for r in native + traced if isinstance(r["bench"].get(name), str)]
            rows.append(["FAIL", step, "no times: %s" % (errors[:1] or "not run")])
            continue
        ratio = statistics.median(t_times) / statistics.median(n_times)
        per_round = [statistics.median(t["bench"][name]) / statistics.median(n["bench"][name])
                     for n, t in zip(native, traced)
                     if isinstance(n["bench"].get(name), list) and isinstance(t["bench"].get(name), list)]
        missing = ["%s bench process %d: %s" % (r["allocator"], i + 1, str(r["bench"].get(name, "not run"))[:120])
                   for rounds in (native, traced) for i, r in enumerate(rounds)
                   if not isinstance(r["bench"].get(name), list)]
        rows.append(["meets" if ratio <= 1.02 else "misses", step,
                     "%.3fx (native %.2f us, tracepool %.2f us per step, medians of %d and %d reps; per-round ratios %s)%s"
                     % (ratio, statistics.median(n_times), statistics.median(t_times), len(n_times), len(t_times),
                        " ".join("%.3f" % r for r in per_round), "; no times from " + "; ".join(missing) if missing else "")])
    return rows


if __name__ == "__main__":
    sys.exit(main(CHECKS, ("native", "tracepool"), run, compare))
