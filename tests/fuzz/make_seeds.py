#!/usr/bin/env python3
"""Writes the seed corpus of the C API fuzzer (tests/fuzz/corpus/seed-*), deterministically.

The byte-code is documented at the top of api_fuzzer.cpp; the helpers below spell it. Every op, both
modes (one thread, 2-4 threads), capture on and off, the small capacity and the configured limit, and
the edge values (sizes, devices, streams, labels) appear in at least one seed. Inputs that libFuzzer
found and tests/fuzz/run.sh kept are in the same directory under their hash names; this script
replaces only the seed-* files.

    python3 tests/fuzz/make_seeds.py
"""
import os
import random

(MALLOC, FREE_LIVE, FREE_STALE, FREE_INNER, FREE_BOGUS, RECORD, EMPTY, LIMIT, STATS, RESET, MARK, TAG_PUSH,
 TAG_POP, REPORT, INFO, VALIDATE, MISC, CHURN) = range(18)

# Mode byte.
def mode(threads=1, capture=False, small=False, limit=False):
    return bytes([(threads - 1) | (4 if capture else 0) | (8 if small else 0) | (16 if limit else 0)])

# Device selectors: D % 8 -> 0 1 0 1 0 1 bad -1; the bad one is 2 7 64 INT_MAX INT_MIN -2 by D // 8 % 6.
DEV0, DEV1, ALL = 0, 1, 7
def bad(j):
    return 6 + 8 * j
BAD_DEVICES = [bad(j) for j in range(6)]

# Streams: S % 4 -> NULL, 0x100, 0x200, UINTPTR_MAX.
STREAMS = [0, 1, 2, 3]

# Sizes (K, V): K % 8 -> V, V, V*16, V*256, V*1024, edge_sizes[V], V*512, capacity + V - 32768.
def exact(n):
    assert 0 <= n < 65536
    return (0, n)
def kib(n):
    return (4, n)
def edge(i):
    return (5, i)
def around_capacity(delta):
    return (7, 32768 + delta)
EDGE_COUNT = 27  # entries of edge_sizes in api_fuzzer.cpp

def malloc(size, dev=DEV0, stream=0):
    k, v = size
    return bytes([MALLOC, dev, stream, k, v & 0xff, v >> 8])
def free_live(i=0):
    return bytes([FREE_LIVE, i])
def free_stale(i=0):
    return bytes([FREE_STALE, i])
def free_inner(i=0, offset=0):
    return bytes([FREE_INNER, i, offset & 0xff, offset >> 8])
def free_bogus(b):
    return bytes([FREE_BOGUS, b])
def record(i, which, stream):
    return bytes([RECORD, i, which, stream])
def empty(dev):
    return bytes([EMPTY, dev])
def limit(dev, size):
    k, v = size
    return bytes([LIMIT, dev, k, v & 0xff, v >> 8])
def stats(dev, shape=0):
    return bytes([STATS, dev, shape])
def reset(dev, peak):
    return bytes([RESET, dev, 1 if peak else 0])
def mark(label=0):
    return bytes([MARK, label])
def tag_push(label=0):
    return bytes([TAG_PUSH, label])
def tag_pop():
    return bytes([TAG_POP])
def report(f):
    return bytes([REPORT, f])
def info(dev, null_out=False):
    return bytes([INFO, dev, 1 if null_out else 0])
def validate():
    return bytes([VALIDATE])
def misc(x):
    return bytes([MISC, x])
def churn(n, dev=DEV0):
    return bytes([CHURN, n, dev])

# Labels: L % 8 -> "epoch", "", 256 bytes, 257 bytes, control byte, invalid UTF-8, quotes, NULL.
LABELS = range(8)


def seeds():
    s = {}
    s["st-nothing"] = mode()
    s["st-malloc-free"] = mode() + b"".join(
        malloc(exact(n), dev) for n, dev in [(1, DEV0), (512, DEV1), (4096, DEV0), (65535, DEV1)]) + \
        free_live(1) + free_live(0) + free_live(5) + free_live(0) + free_live(0)
    s["st-edge-sizes"] = mode() + b"".join(malloc(edge(i)) + free_live(0) for i in range(EDGE_COUNT))
    s["st-edge-sizes-kept"] = mode(small=True) + b"".join(malloc(edge(i), DEV1) for i in range(EDGE_COUNT))
    s["st-bad-devices"] = mode() + b"".join(
        malloc(exact(0), d) + malloc(edge(EDGE_COUNT - 1), d) + malloc(exact(512), d) for d in BAD_DEVICES + [ALL])
    s["st-streams"] = mode() + b"".join(malloc(exact(1000 * (i + 1)), DEV0, st) for i, st in enumerate(STREAMS)) + \
        b"".join(malloc(exact(3000), DEV1, st) for st in STREAMS) + free_live(0) * 8
    s["st-stale"] = mode() + malloc(exact(512)) + free_live(0) + free_stale(0) + malloc(exact(512)) + \
        free_stale(0) + free_stale(0) + malloc(kib(3000)) + free_live(0) + empty(ALL) + free_stale(1) + free_stale(0)
    s["st-interior"] = mode() + malloc(exact(4096)) + free_inner(0, 0) + free_inner(0, 255) + free_inner(0, 4094) + \
        malloc(exact(1)) + free_inner(1, 7) + malloc(kib(12000), DEV1) + free_inner(2, 65535) + free_live(0)
    s["st-bogus"] = mode() + b"".join(free_bogus(b) for b in range(6)) + malloc(exact(100)) + \
        b"".join(free_bogus(b) for b in range(6))
    s["st-record-stream"] = mode() + malloc(exact(2048), DEV0, 0) + record(0, 0, 1) + record(0, 0, 2) + \
        record(0, 0, 3) + record(0, 2, 1) + record(0, 3, 1) + free_live(0) + record(0, 1, 2) + \
        malloc(exact(2048), DEV0, 1) + record(0, 1, 0) + free_live(0) + empty(DEV0) + malloc(exact(2048), DEV0, 2)
    s["st-empty-cache"] = mode() + malloc(exact(5000)) + malloc(exact(5000), DEV1) + malloc(kib(5000)) + \
        free_live(0) + empty(DEV0) + empty(DEV1) + free_live(0) + free_live(0) + empty(ALL) + \
        b"".join(empty(d) for d in BAD_DEVICES)
    s["st-limit"] = mode() + limit(DEV0, edge(12)) + malloc(exact(4096)) + malloc(kib(3000)) + \
        malloc(kib(1500)) + limit(DEV0, exact(0)) + malloc(kib(3000)) + limit(ALL, exact(1)) + \
        malloc(exact(512), DEV1) + limit(ALL, edge(EDGE_COUNT - 1)) + malloc(exact(512), DEV1) + \
        limit(bad(3), exact(1)) + free_live(0) + free_live(0)
    s["st-oom"] = mode(small=True) + malloc(around_capacity(0)) + malloc(around_capacity(1)) + \
        report(5) + malloc(kib(20480)) + malloc(kib(4000)) + malloc(kib(4000)) + report(5) + free_live(0) + \
        malloc(around_capacity(-512), DEV1) + free_live(1) + malloc(edge(22)) + malloc(edge(23))
    s["st-oom-capture"] = mode(capture=True) + tag_push(0) + malloc(kib(40000)) + malloc(kib(40000)) + \
        report(5) + tag_pop() + report(0)
    s["st-config-limit"] = mode(limit=True) + malloc(kib(30000)) + malloc(kib(20000)) + stats(DEV0) + \
        limit(DEV0, exact(0)) + malloc(kib(20000)) + free_live(0) + free_live(0)
    s["st-stats"] = mode() + malloc(exact(700)) + b"".join(stats(d, z) for d in [DEV0, DEV1, bad(0), bad(4)]
                                                          for z in range(4))
    s["st-reset"] = mode() + malloc(exact(700)) + malloc(kib(2000)) + free_live(1) + reset(DEV0, True) + \
        reset(DEV0, False) + malloc(kib(2)) + reset(ALL, True) + reset(ALL, False) + reset(bad(1), True) + \
        reset(bad(2), False) + malloc(edge(EDGE_COUNT - 4)) + free_bogus(1) + reset(ALL, False)
    s["st-marks"] = mode() + b"".join(mark(l) + malloc(exact(512 * (l + 1))) for l in LABELS) + mark(0) * 20
    # Marks have no end: past the 4096 an instance once kept, mark still succeeds and reports still work.
    s["st-many-marks"] = mode() + (malloc(exact(700)) + mark(0) * 50 + mark(6) * 50) * 45 + report(0) + report(1)
    s["st-tags"] = mode() + tag_pop() + b"".join(tag_push(l) for l in LABELS) + malloc(exact(64)) + tag_pop() * 6
    s["st-tags-deep"] = mode(capture=True) + (tag_push(0) + tag_push(6)) * 35 + malloc(exact(4096)) + \
        tag_pop() * 72
    s["st-reports"] = mode() + malloc(exact(512)) + mark(0) + malloc(kib(100)) + \
        b"".join(report(f) for f in range(8))
    s["st-report-files"] = mode() + malloc(exact(512)) + tag_push(6) + mark(6) + malloc(kib(100)) + \
        b"".join(report(f) for f in [8 + 2, 8 + 3, 8 + 7, 2, 3, 7])
    s["st-reports-capture"] = mode(capture=True) + tag_push(0) + malloc(exact(512)) + tag_pop() + mark(0) + \
        malloc(exact(512)) + report(1) + report(4) + report(0) + report(6)
    s["st-info"] = mode() + malloc(kib(3000)) + b"".join(info(d) for d in [DEV0, DEV1, ALL, bad(0), bad(5)]) + \
        info(DEV0, True) + info(bad(2), True)
    s["st-misc"] = mode() + b"".join(misc(x) for x in range(8)) + misc(8 * 12 + 2) + misc(8 * 31 + 2) + \
        misc(2) + validate()
    s["st-churn"] = mode() + churn(7) + churn(3, DEV1) + malloc(exact(100)) + churn(255) + empty(ALL) + churn(4)
    s["st-large-pool"] = mode() + malloc(edge(10)) + malloc(edge(14)) + malloc(edge(15)) + malloc(edge(16)) + \
        free_live(1) + free_live(0) + malloc(edge(9)) + malloc(edge(12)) + free_live(0) + free_live(0) + \
        free_live(0) + empty(ALL)
    # Several threads: op i runs on thread i % n.
    s["mt2-malloc-free"] = mode(2) + (malloc(exact(3000)) + malloc(exact(5000), DEV1)) * 6 + \
        (free_live(0) + free_live(3)) * 6
    s["mt4-malloc-free-empty"] = mode(4) + (
        malloc(exact(4096)) + malloc(kib(1500)) + free_inner(0, 17) + empty(DEV0) +
        free_live(0) + free_inner(0, 17) + empty(ALL) + malloc(exact(512))) * 8
    s["mt3-stale-bogus"] = mode(3) + (malloc(exact(512)) * 3 + free_live(0) * 3 + free_stale(0) * 3 +
                                      free_bogus(0) + free_bogus(2) + free_bogus(4)) * 3
    s["mt2-reports-marks-tags"] = mode(2) + (tag_push(0) + mark(0) + malloc(exact(999)) + tag_push(5)) * 2 + \
        report(0) + report(1) + tag_pop() * 4 + mark(3) + tag_pop() + report(4) + report(5)
    s["mt4-churn-empty"] = mode(4) + (churn(5) + churn(6, DEV1) + empty(ALL) + churn(2)) * 6
    s["mt2-record-streams"] = mode(2) + (malloc(exact(2048), DEV0, 1) + malloc(exact(2048), DEV0, 2)) * 2 + \
        (record(0, 0, 2) + record(0, 0, 1)) * 2 + free_live(0) * 2 + record(0, 1, 0) * 2 + \
        malloc(exact(2048), DEV0, 0) * 2 + record(0, 2, 3) * 2 + record(0, 3, 0) * 2
    s["mt4-stats-limits-resets"] = mode(4) + (malloc(kib(900)) + stats(DEV0) + limit(DEV1, kib(30000)) +
                                              reset(ALL, True) + malloc(exact(100), DEV1) + reset(DEV0, False) +
                                              info(DEV0) + validate()) * 3
    s["mt3-capture-oom"] = mode(3, capture=True, small=True) + (malloc(kib(10000)) + malloc(kib(10000), DEV1) +
                                                                malloc(around_capacity(1))) * 3 + report(5) * 3
    # Longer mixes, from a fixed seed: every op with arguments drawn near the interesting values.
    rng = random.Random(11)
    for n in range(12):
        threads = 1 if n < 6 else 2 + n % 3
        out = bytearray(mode(threads, capture=n % 4 == 3, small=n % 3 == 1, limit=n % 5 == 2))
        for _ in range(60 + 10 * n):
            code = rng.choice([MALLOC] * 6 + [FREE_LIVE] * 4 + list(range(18)))
            if code == REPORT and rng.random() < 0.7:
                code = VALIDATE
            args = [rng.randrange(256) for _ in range([5, 1, 1, 3, 1, 3, 1, 4, 2, 2, 1, 1, 0, 1, 2, 0, 1, 2][code])]
            if code == MALLOC:
                args[2] = rng.choice([0, 1, 2, 2, 3, 5, 6])
                if args[2] in (3, 6):
                    args[4] = rng.randrange(8)
            out += bytes([code] + args)
        s["mix-%s-%02d" % ("st" if threads == 1 else "mt%d" % threads, n)] = bytes(out)
    return s


def main():
    corpus = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
    os.makedirs(corpus, exist_ok=True)
    for name in os.listdir(corpus):
        if name.startswith("seed-"):
            os.remove(os.path.join(corpus, name))
    all_seeds = seeds()
    for name, data in sorted(all_seeds.items()):
        with open(os.path.join(corpus, "seed-" + name), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(all_seeds), corpus))


if __name__ == "__main__":
    main()
