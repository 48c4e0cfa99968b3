"""What call sites cost inside PyTorch (issue 15), on the GPU machine; tests/gpu/run.sh runs it.

    capture_bench.py relay --out FILE [--turns N] [--budget S] [--variants V,...] [--workloads W,...]
    capture_bench.py serve VARIANT     (one process of the relay; commands on stdin)
    capture_bench.py report FILE       (no torch: the relay's JSON -> "STATUS|step|detail" rows)

Note [Turns]
Step times on the GPU machine drift by 10-30% over minutes (PyTorch's own allocator read 21-28 ms per
ResNet-50 step across five rounds of fresh processes in one call), which hides a 2% difference
between processes run one after another. So every variant runs in its own process, all of them at
once, set up and warmed once, and they take turns: one runs a short stretch of steps (a turn, about
half a second) while the others wait on a pipe, doing nothing, and the order rotates from turn to
turn. A variant's figure in one round is compared with PyTorch's in the same round, seconds apart;
the rows give the median of those per-round ratios, their spread (interquartile range and extremes),
and the ratio of the medians. The first step of each turn is not counted (the GPU switches contexts,
and it was often a few ms slower). Seen on the H200: step times also jump between ~18 and ~30 ms
from one second to the next, whatever the variant, so even paired rounds spread by +-10% (IQR);
turns of a tenth of a second did not narrow that (40 rounds of 5 counted ResNet-50 steps: +-15%),
so the turns stay at half a second and the rounds are many, which narrows their median.

VARIANT (PyTorch picks its allocator once per process, so one process each):
  pytorch            PyTorch's own caching allocator
  pytorch_history    the same under torch.cuda.memory._record_memory_history(stacks="all")
  off, python, native, all
                     tracepool.torch.install() with capture:<mode> appended to TRACEPOOL_CONF
                     (all, Python and native frames, is tracepool's default)
  timed_off, timed_python, timed_native, timed_all
                     the same, with tests/gpu/timed_shim.cpp preloaded (TRACEPOOL_TIMED_SHIM names the
                     built shim, TRACEPOOL_TIMED_LIB the library it wraps): the time spent inside
                     tracepool_malloc and tracepool_free; only the CPU-bound workloads (resnet50,
                     resnet18) run there
  pytorch_expandable PyTorch's allocator with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  classic, growable  tracepool.torch.install() with capture:off and segments:classic or segments:growable
                     (segments_bench.py; capture:off alone is growable on CUDA, the default)
  VARIANT@PYTHON     VARIANT under another interpreter (a venv with another build of the package, and
                     for timed_* TRACEPOOL_TIMED_LIB_<n>, n its place among the @ variants from 1): two
                     builds compared in one relay; report rows name the plain variants only, the JSON
                     has every player

WORKLOADS (set up once per process, then timed in turns): resnet50, gpt2, varlen, resnet18, empty;
  bench_workloads.py says what each runs.
"""
import argparse
import ctypes
import gc
import json
import os
import selectors
import statistics
import subprocess
import sys
import time

from bench_workloads import empty, gpt2, resnet18, resnet50, resnet50_step, varlen  # noqa: F401 (serve's)

GiB = float(1 << 30)
CAPTURE_MODES = ("off", "python", "native", "all")
# segments_bench.py's: PyTorch's allocator with expandable segments, and tracepool untagged on growable segments.
SEGMENT_VARIANTS = ("pytorch_expandable", "classic", "growable")
VARIANTS = ("pytorch", "pytorch_history") + CAPTURE_MODES + tuple("timed_" + m for m in CAPTURE_MODES) + SEGMENT_VARIANTS
DEFAULT_VARIANTS = ("pytorch", "off", "python", "native", "all", "timed_off", "timed_python", "timed_all")
WORKLOADS = ("resnet50", "gpt2", "resnet18", "empty", "varlen")
TIMED_WORKLOADS = ("resnet50", "resnet18")
LABELS = {"resnet50": "ResNet-50 AdamW step (fresh batch)", "gpt2": "GPT-2 AdamW step",
          "resnet18": "ResNet-18 inference, batch 1", "empty": "torch.empty loop",
          "varlen": "GPT-2 AdamW step, variable length"}
TARGETS = {"resnet50": 1.02, "gpt2": 1.02, "resnet18": 1.05, "empty": None, "varlen": 1.02}  # for the default (all)
UNITS = {"resnet50": "ms", "gpt2": "ms", "resnet18": "ms", "empty": "ns", "varlen": "ms"}
UNIT_NAMES = {"resnet50": "step", "gpt2": "step", "resnet18": "iteration", "empty": "pair", "varlen": "step"}
CAPTURE_TARGET_US = 0.3  # default capture, per allocation
MARK = "@@"  # starts the serve process's replies on its stdout


def install(variant):
    """Imports torch with the variant's allocator; nothing here may initialise CUDA."""
    mode = variant.split("_", 1)[1] if variant.startswith("timed_") else variant
    conf = {"growable": "capture:off,segments:growable", "classic": "capture:off,segments:classic"}.get(
        mode, "capture:" + mode)
    if mode in CAPTURE_MODES or mode in SEGMENT_VARIANTS[1:]:
        import tracepool.torch
        tracepool.torch.install(",".join(c for c in (os.environ.get("TRACEPOOL_CONF", ""), conf) if c))
    if variant == "pytorch_expandable":  # read when CUDA initialises
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import torch
    return torch


def allocations(torch):
    """Allocations made so far, as the allocator counts them (tracepool's and PyTorch's own both answer
    torch.cuda.memory_stats once tracepool is installed)."""
    return torch.cuda.memory_stats().get("allocation.all.allocated", 0)


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


def reserved_peak_gib(torch):
    """The most the allocator held from the device (all the variants' processes share the GPU, so
    what the driver says is in use is theirs together; each allocator answers memory_stats)."""
    return torch.cuda.memory_stats().get("reserved_bytes.all.peak", 0) / GiB


# ---- serve: one variant's process ------------------------------------------------------------------
def serve(variant):
    """Answers the relay's commands, one JSON line each (after MARK) on the stdout it was given; the
    process's own output goes to stderr. Commands: "setup W", "turn W", "drop W", "capture", "quit"."""
    reply_to = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def reply(**fields):
        reply_to.write(MARK + json.dumps(fields) + "\n")
        reply_to.flush()

    try:
        torch = install(variant)
        if variant == "pytorch_history":
            torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="all", max_entries=100_000)
        torch.cuda.init()
        reply(ok=True, gpu=torch.cuda.get_device_name(0), torch=torch.__version__, pid=os.getpid())
    except Exception as e:  # noqa: BLE001 (every failure goes to the relay)
        reply(ok=False, error="%s: %s" % (type(e).__name__, e))
        return 1
    loaded = {}
    for line in sys.stdin:
        cmd, _, name = line.strip().partition(" ")
        try:
            if cmd == "quit":
                break
            if cmd == "setup":
                start = time.perf_counter()
                loaded[name] = globals()[name](torch)
                reply(ok=True, seconds=round(time.perf_counter() - start, 1))
            elif cmd == "turn":
                a0, t0 = allocations(torch), timed_counters()
                values = loaded[name].turn()
                t1 = timed_counters()
                timed = None if t0 is None or t1 is None else dict(zip(("ns", "allocs", "frees"),
                                                                       (x - y for x, y in zip(t1, t0))))
                reply(ok=True, values=values, calls=loaded[name].calls, allocs=allocations(torch) - a0, timed=timed)
            elif cmd == "drop":
                mem = reserved_peak_gib(torch)
                loaded.pop(name, None)
                gc.collect()
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                reply(ok=True, reserved_peak_gib=mem)
            elif cmd == "capture":
                capture = {}
                if variant in CAPTURE_MODES or variant.startswith("timed_"):
                    import tracepool
                    capture = json.loads(tracepool.report(format="json")).get("capture", {})
                reply(ok=True, capture={k: capture.get(k) for k in ("mode", "unwinder", "sites", "cfi_slow_stacks",
                                                                    "cfi_walks_replayed", "cfi_walks_taken")})
            else:
                reply(ok=False, error="unknown command %r" % line.strip())
        except ImportError as e:
            loaded.pop(name, None)
            reply(ok=False, skip=True, error="import failed: %s" % e)
        except Exception as e:  # noqa: BLE001
            loaded.pop(name, None)
            text = str(e).splitlines()[0][:300] if str(e) else "-"
            reply(ok=False, error="%s: %s" % (type(e).__name__, text))
    return 0


# ---- relay: the variants' processes, in turns (Note [Turns]) ---------------------------------------
class Player:
    """One serve process and what it answered."""

    def __init__(self, variant, env):
        self.variant, self.error = variant, None
        mode, _, python = variant.partition("@")
        self.proc = subprocess.Popen([python or sys.executable, os.path.abspath(__file__), "serve", mode], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.record = {"variant": variant, "workloads": {}}

    def send(self, command):
        if self.error is None:
            try:
                self.proc.stdin.write(command + "\n")
                self.proc.stdin.flush()
            except OSError as e:
                self.error = "the process is gone (%s)" % e

    def answer(self, deadline):
        """The next reply, or None (and self.error) past `deadline` or when the process ended."""
        if self.error is not None:
            return None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self.error = "no answer in time"
                    self.proc.kill()
                    return None
                line = self.proc.stdout.readline()
                if not line:
                    self.error = "exited with status %s" % self.proc.wait()
                    return None
                if line.startswith(MARK):
                    return json.loads(line[len(MARK):])

    def ask(self, command, deadline):
        self.send(command)
        return self.answer(deadline)


def relay(args):
    start = time.monotonic()
    deadline = start + args.budget
    variants, workloads = args.variants.split(","), args.workloads.split(",")
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    players, others = [], 0
    for v in variants:
        e = dict(env)
        if "@" in v:
            others += 1
        if v.startswith("timed_"):
            if not os.environ.get("TRACEPOOL_TIMED_SHIM"):
                continue
            e["LD_PRELOAD"] = os.environ["TRACEPOOL_TIMED_SHIM"]
            if "@" in v:
                e["TRACEPOOL_TIMED_LIB"] = os.environ.get("TRACEPOOL_TIMED_LIB_%d" % others, "")
        players.append(Player(v, e))
    out = {"turns_asked": args.turns, "variants": variants, "workloads": workloads, "players": []}
    for p in players:  # all start at once; each answers when torch is imported
        hello = p.answer(min(deadline, time.monotonic() + 180))
        if hello and hello.get("ok"):
            out.setdefault("gpu", hello.get("gpu"))
            out.setdefault("torch", hello.get("torch"))
        elif p.error is None:
            p.error = hello.get("error") if hello else "no answer"
    for w in workloads:
        playing = [p for p in players if p.error is None and (w in TIMED_WORKLOADS or not p.variant.startswith("timed_"))]
        for p in playing:
            p.send("setup " + w)
        for p in playing:
            a = p.answer(min(deadline, time.monotonic() + 240))
            rec = p.record["workloads"][w] = {"turns": []}
            if a is None or not a.get("ok"):
                rec["status"] = "skip" if a and a.get("skip") else "error"
                rec["error"] = (a or {}).get("error") or p.error
        playing = [p for p in playing if p.record["workloads"][w].get("status") is None]
        # Each workload gets its share of what is left, kept for those after it.
        share = (deadline - time.monotonic()) / (len(workloads) - workloads.index(w))
        until = time.monotonic() + share
        for t in range(args.turns if playing else 0):
            if time.monotonic() > until:
                break
            for p in playing[t % len(playing):] + playing[:t % len(playing)]:
                a = p.ask("turn " + w, min(deadline, time.monotonic() + 120))
                rec = p.record["workloads"][w]
                if a is None or not a.get("ok"):
                    rec.setdefault("error", (a or {}).get("error") or p.error)
                    continue
                a["round"] = t
                rec["turns"].append(a)
        for p in playing:
            a = p.ask("drop " + w, min(deadline + 30, time.monotonic() + 60))
            rec = p.record["workloads"][w]
            rec["status"] = "ok" if rec["turns"] else "error"
            if a and a.get("ok"):
                rec["reserved_peak_gib"] = a["reserved_peak_gib"]
    for p in players:
        a = p.ask("capture", time.monotonic() + 30)
        if a and a.get("ok"):
            p.record["capture"] = a["capture"]
        p.send("quit")
        try:
            p.proc.stdin.close()
            p.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            p.proc.kill()
        if p.error:
            p.record["error"] = p.error
        out["players"].append(p.record)
    out["seconds"] = round(time.monotonic() - start, 1)
    with open(args.out, "w") as f:
        json.dump(out, f)
    return 0


# ---- report: no torch from here on ---------------------------------------------------------------
def played(out, variant, workload):
    """(the player's record, its record of `workload`, or None), or (None, None) if no such player."""
    for rec in out.get("players", []):
        if rec["variant"] == variant:
            return rec, rec.get("workloads", {}).get(workload)
    return None, None


def turn_figures(out, variant, workload):
    """{round: the median of the turn's counted steps} of one variant, and its failure if any."""
    rec, w = played(out, variant, workload)
    if rec is None:
        return {}, None
    if w is None:
        return {}, rec.get("error") or "did not run"
    figures = {t["round"]: statistics.median(t["values"][1:] or t["values"]) for t in w["turns"]}
    return figures, None if figures else w.get("error", "no turn")


def fmt(value, unit):
    return ("%.0f" if unit == "ns" else "%.2f") % value


def spread(ratios):
    """'median m (IQR a-b; c-d; n rounds)' of per-round ratios."""
    if len(ratios) >= 4:
        q = statistics.quantiles(ratios, n=4)
        iqr = "IQR %.3f-%.3f; " % (q[0], q[2])
    else:
        iqr = ""
    return "median %.3f (%s%.3f-%.3f; %d rounds)" % (statistics.median(ratios), iqr, min(ratios), max(ratios), len(ratios))


def step_row(out, workload):
    """Each variant's median over its turns, the ratio of that to PyTorch's, and the per-round ratios
    (round k of a variant against round k of PyTorch, seconds apart: Note [Turns]). The verdict is on
    the median of the per-round ratios of the default (all)."""
    unit, target = UNITS[workload], TARGETS[workload]
    name = "capture bench: %s, %s" % (LABELS[workload], "ns per pair" if unit == "ns" else unit)
    if "pytorch" not in [r["variant"] for r in out.get("players", [])]:
        return None  # a relay of builds or modes alone (VARIANT@PYTHON): nothing to compare with
    base, failure = turn_figures(out, "pytorch", workload)
    if not base:
        return "%s|%s|pytorch: %s" % ("SKIP" if failure and "import failed" in failure else "FAIL", name, failure)
    base_median = statistics.median(base.values())
    parts = ["pytorch %s (%s-%s over %d rounds)" % (fmt(base_median, unit), fmt(min(base.values()), unit),
                                                     fmt(max(base.values()), unit), len(base))]
    verdict = "info"
    for variant in ("off", "python", "native", "all", "pytorch_history"):
        figures, failure = turn_figures(out, variant, workload)
        if not figures:
            if failure:
                parts.append("%s: %s" % (variant, failure))
                verdict = "FAIL" if variant == "all" else verdict
            continue
        ratios = [figures[r] / base[r] for r in figures if r in base]
        if not ratios:
            continue
        parts.append("%s %s, per round %s, of medians %.3fx" % (
            variant, fmt(statistics.median(figures.values()), unit), spread(ratios),
            statistics.median(figures.values()) / base_median))
        if variant == "all" and target is not None:
            verdict = "meets" if statistics.median(ratios) <= target else "misses"
    allocs = allocations_per_unit(out, "pytorch", workload)
    tail = "; %.0f allocations per %s" % (allocs, UNIT_NAMES[workload]) if allocs else ""
    goal = " (target: all <= %.2fx)" % target if target else ""
    return "%s|%s|%s%s%s" % (verdict, name, "; ".join(parts), tail, goal)


def allocations_per_unit(out, variant, workload):
    _, w = played(out, variant, workload)
    if not w or not w["turns"]:
        return None
    return sum(t["allocs"] for t in w["turns"]) / sum(len(t["values"]) * t["calls"] for t in w["turns"])


def capture_cost_row(out):
    """From the timed processes: µs per allocation spent inside tracepool, each mode minus capture:off,
    per round (the timed processes take their turns too), then the median."""
    name = "capture bench: us per allocation spent capturing (timed shim)"
    parts, verdict = [], "info"
    for workload in TIMED_WORKLOADS:
        per = {mode: timed_per_round(out, "timed_" + mode, workload) for mode in CAPTURE_MODES}
        added = {}
        for mode in ("python", "native", "all"):
            diffs = [(per[mode][r] - per["off"][r]) / 1e3 for r in per[mode] if r in per["off"]]
            if diffs:
                added[mode] = diffs
        if "all" not in added:
            continue
        others = ", ".join("%s %+.3f" % (m, statistics.median(added[m])) for m in ("python", "native") if m in added)
        a = added["all"]
        parts.append("%s: all %+.3f (rounds %+.3f to %+.3f)%s; inside tracepool with capture:off %.3f" % (
            workload, statistics.median(a), min(a), max(a), " (%s)" % others if others else "",
            statistics.median(per["off"].values()) / 1e3))
        verdict = "misses" if statistics.median(a) > CAPTURE_TARGET_US else ("meets" if verdict == "info" else verdict)
    if not parts:
        return "FAIL|%s|no timed process measured both capture:off and capture:all" % name
    return "%s|%s|%s (target: all <= %.1f us)" % (verdict, name, "; ".join(parts), CAPTURE_TARGET_US)


def timed_per_round(out, variant, workload):
    """{round: ns inside tracepool per allocation} of one timed player."""
    _, w = played(out, variant, workload)
    return {t["round"]: t["timed"]["ns"] / t["timed"]["allocs"] for t in (w or {}).get("turns", [])
            if t.get("timed") and t["timed"]["allocs"]}


def other_build_rows(out):
    """For each VARIANT@PYTHON timed player: its time inside tracepool per allocation against VARIANT's,
    round by round (the two builds took their turns seconds apart)."""
    rows = []
    for rec in out.get("players", []):
        variant, _, python = rec["variant"].partition("@")
        if not python or not variant.startswith("timed_"):
            continue
        parts = []
        for workload in TIMED_WORKLOADS:
            a, b = timed_per_round(out, variant, workload), timed_per_round(out, rec["variant"], workload)
            diffs = [b[r] - a[r] for r in a if r in b]
            if len(diffs) >= 4:
                q = statistics.quantiles(diffs, n=4)
                parts.append("%s: %.0f ns per allocation against %.0f, per round %+.0f (IQR %+.0f to %+.0f; "
                             "slower in %d of %d rounds)" % (workload, statistics.median(b.values()),
                                                             statistics.median(a.values()), statistics.median(diffs),
                                                             q[0], q[2], sum(d > 0 for d in diffs), len(diffs)))
        if parts:
            rows.append("info|capture bench: %s under %s|%s" % (variant, python, "; ".join(parts)))
    return rows


def memory_row(out, workload):
    name = "capture bench: %s, peak reserved GiB" % LABELS[workload]
    mem = {}
    for rec in out.get("players", []):
        w = rec.get("workloads", {}).get(workload)
        if w and "reserved_peak_gib" in w:
            mem[rec["variant"]] = w["reserved_peak_gib"]
    if "pytorch" not in mem:
        return None
    parts, worse = ["pytorch %.2f" % mem["pytorch"]], False
    for variant in ("off", "all"):
        if variant in mem:
            parts.append("%s %.2f" % (variant, mem[variant]))
            worse |= mem[variant] > mem["pytorch"] + 0.01
    return "%s|%s|%s (target <= pytorch)" % (
        "misses" if worse else "meets", name, ", ".join(parts))


def walks_row(out):
    """How often the default's captures re-read a remembered walk (cfi) instead of walking."""
    recs = [r.get("capture") for r in out.get("players", []) if r["variant"] == "all" and r.get("capture")]
    if not recs:
        return None
    c = recs[-1]
    replayed, taken = c.get("cfi_walks_replayed") or 0, c.get("cfi_walks_taken") or 0
    share = replayed / (replayed + taken) if replayed + taken else 0
    return "info|capture bench: remembered walks (capture:all, one process)|%s unwinder; %d captures re-read a " \
           "remembered walk, %d walked (%.1f%% recalled); %s sites; %s stacks left to boost" % (
               c.get("unwinder"), replayed, taken, 100 * share, c.get("sites"), c.get("cfi_slow_stacks"))


def relay_header(path, bench, players):
    """The relay's result at `path`, after printing its rows for failed processes and for the turns taken
    (`bench` names the rows, `players` the processes); None, after a FAIL row, if there is none."""
    try:
        with open(path) as f:
            out = json.load(f)
    except (OSError, ValueError) as e:
        print("FAIL|%s|no relay result: %s" % (bench, e))
        return None
    failed = ["%s: %s" % (r["variant"], r["error"]) for r in out.get("players", []) if r.get("error")]
    if failed:
        print("FAIL|%s: processes|%s" % (bench, "; ".join(failed)))
    print("info|%s: turns|%s, torch %s; %d %s taking turns (Note [Turns]), %s s in all" % (
        bench, out.get("gpu"), out.get("torch"), len(out.get("players", [])), players, out.get("seconds")))
    return out


def report(path):
    out = relay_header(path, "capture bench", "variants")
    if out is None:
        return 0
    ran = [w for w in WORKLOADS if w in out.get("workloads", [])]
    for workload in ran:
        row = step_row(out, workload)
        if row:
            print(row)
    if any(r["variant"].startswith("timed_") for r in out.get("players", [])):
        print(capture_cost_row(out))
    for row in other_build_rows(out):
        print(row)
    for workload in ("resnet50", "gpt2"):
        row = memory_row(out, workload)
        if row:
            print(row)
    row = walks_row(out)
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
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        return serve(sys.argv[2])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("relay")
    r.add_argument("--out", required=True)
    r.add_argument("--turns", type=int, default=30, help="rounds of turns per workload, at most")
    r.add_argument("--budget", type=float, default=400, help="seconds for the whole relay")
    r.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    r.add_argument("--workloads", default=",".join(WORKLOADS))
    args = p.parse_args()
    for given, known in ((args.variants, VARIANTS), (args.workloads, WORKLOADS)):
        unknown = [x for x in given.split(",") if x.partition("@")[0] not in known]
        if unknown:
            p.error("unknown: %s" % ", ".join(unknown))
    return relay(args)


if __name__ == "__main__":
    sys.exit(main())
