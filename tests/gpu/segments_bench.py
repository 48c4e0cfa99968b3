"""Growable segments against PyTorch's allocators (issue 18), on the GPU machine; tests/gpu/run.sh runs it
(TRACEPOOL_GPU_STEPS=segments).

    segments_bench.py report FILE     (no torch: a capture_bench.py relay's JSON -> "STATUS|step|detail" rows)

The relay (capture_bench.py relay --variants pytorch,pytorch_expandable,classic,growable --workloads
gpt2,resnet50,varlen) runs the four allocators in processes of their own, all at once, taking turns
(Note [Turns] in capture_bench.py): PyTorch's default allocator, PyTorch's with expandable segments,
tracepool on classic segments and tracepool on growable segments, both untagged (capture:off), so that
the rows compare segment policies and not call-site capture. Each workload (bench_workloads.py) is set
up, warmed, timed in turns, then dropped; the figures are the step time (the median of each turn's
counted steps; per round against PyTorch's default in the same round) and the allocator's peak
reserved bytes over the workload (memory_stats' reserved_bytes.all.peak: bytes mapped, under both
expandable and growable segments), read before the cache is emptied for the next workload.

Targets (issue 18), for tracepool growable on every workload: peak reserved at most native expandable's
and below native default's; step time at most 1.02x native default's (the median of the per-round
ratios).
"""
import statistics
import sys

from capture_bench import LABELS, played, relay_header, spread, turn_figures

WORKLOADS = ("gpt2", "resnet50", "varlen")
NAMES = {"pytorch": "native", "pytorch_expandable": "native expandable", "classic": "tracepool classic",
         "growable": "tracepool growable"}
TIME_TARGET = 1.02


def peak_gib(out, variant, workload):
    _, w = played(out, variant, workload)
    return (w or {}).get("reserved_peak_gib")


def row(out, workload):
    """One workload: each allocator's step time, its per-round ratio to native, and its peak reserved."""
    name = "segments: %s" % LABELS[workload]
    base, failure = turn_figures(out, "pytorch", workload)
    if not base:
        return "%s|%s|native: %s" % ("SKIP" if failure and "import failed" in failure else "FAIL", name, failure)
    parts, time_ratio, mem = [], {}, {}
    for variant, label in NAMES.items():
        figures, failure = turn_figures(out, variant, workload)
        mem[variant] = peak_gib(out, variant, workload)
        if not figures:
            parts.append("%s: %s" % (label, failure or "did not run"))
            continue
        ratios = [figures[r] / base[r] for r in figures if r in base]
        time_ratio[variant] = statistics.median(ratios) if ratios else None
        text = "%s %.2f ms" % (label, statistics.median(figures.values()))
        if variant != "pytorch" and ratios:
            text += " (%s)" % spread(ratios)
        if mem[variant] is not None:
            text += ", peak %.2f GiB" % mem[variant]
        parts.append(text)
    g, e, n = mem.get("growable"), mem.get("pytorch_expandable"), mem.get("pytorch")
    t = time_ratio.get("growable")
    if g is None or t is None or e is None or n is None:
        return "FAIL|%s|%s; no figure to judge growable segments by" % (name, "; ".join(parts))
    missed = []
    if t > TIME_TARGET:
        missed.append("time %.3fx > %.2fx" % (t, TIME_TARGET))
    if g > e:
        missed.append("memory above native expandable's by %.2f GiB" % (g - e))
    if g >= n:
        missed.append("memory not below native default's")
    verdict = "misses" if missed else "meets"
    summary = "growable/native time %.3fx, memory %.3fx of native, %.3fx of expandable" % (t, g / n, g / e)
    return "%s|%s|%s; %s%s (targets: time <= %.2fx, memory <= expandable's and < native's)" % (
        verdict, name, "; ".join(parts), summary, "; missed: " + ", ".join(missed) if missed else "", TIME_TARGET)


def report(path):
    out = relay_header(path, "segments bench", "allocators")
    if out is None:
        return 0
    verdicts = []
    for workload in WORKLOADS:
        if workload in out.get("workloads", []):
            line = row(out, workload)
            verdicts.append(line.split("|", 1)[0])
            print(line)
    met = verdicts and all(v == "meets" for v in verdicts)
    print("info|segments bench: the default|%s" % (
        "growable segments met every target in this run" if met else
        "growable segments did not meet every target in this run: %s" % ", ".join(verdicts)))
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "report":
        try:
            return report(sys.argv[2])
        except Exception as e:  # noqa: BLE001 (rows printed so far stand)
            print("FAIL|segments bench|segments_bench.py report crashed: %s: %s" % (type(e).__name__, e))
            return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
