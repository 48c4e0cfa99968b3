"""What naming the holders of device blocks costs in a large process (host only, no GPU, no extension).

    python tests/bench/holders_bench.py [--objects N] [--rounds R]

Builds a heap of about N objects tracked by gc (dicts, lists, tuples and small instances with string
attributes, held from a few module globals through nested containers), then 400 fake device arrays:
200 in a global list, 100 in a closure, 100 in a dict that is an attribute of a global instance. Times
find_holders over R rounds and prints the median, min and max, the objects examined, the heap scans
(levels) and whether the search completed. Measures and prints; asserts nothing about speed.
"""
import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from holders_support import FakeArray, load_holders  # noqa: E402

BLOCK = 1 << 20
BASE = 0x7F0000000000

RECORDS = []  # the unrelated heap, reached through nested containers
INDEX = {}
KEPT = []  # 200 arrays
HOOK = None  # a closure over 100 arrays
TRAINER = None  # .buffers: a dict of 100 arrays


class Record:
    def __init__(self, i):
        self.name = "record-%d" % i
        self.tags = ["t%d" % (i % 7), "t%d" % (i % 11)]
        self.meta = {"id": i, "owner": self.name}


class Trainer:
    def __init__(self, buffers):
        self.buffers = buffers
        self.step = 0


def make_hook(arrays):
    cache = list(arrays)

    def hook():
        return cache

    return hook


def build_heap(objects):
    """Records until gc tracks about `objects` objects: each adds 5 (an instance, a dict, 2 lists, a tuple)."""
    chunk, i = [], 0
    while len(gc.get_objects()) < objects:
        for _ in range(10000):
            record = Record(i)
            row = (record, [i, str(i)])
            chunk.append(row)
            INDEX["record-%d" % i] = record.meta
            i += 1
            if len(chunk) == 1000:
                RECORDS.append({"rows": chunk, "first": chunk[0]})
                chunk = []
    RECORDS.append({"rows": chunk})
    return i


def build_arrays():
    global HOOK, TRAINER
    addresses = iter(range(BASE, BASE + 400 * BLOCK, BLOCK))
    KEPT.extend(FakeArray(next(addresses), BLOCK) for _ in range(200))
    HOOK = make_hook(FakeArray(next(addresses), BLOCK) for _ in range(100))
    TRAINER = Trainer({"w%d" % i: FakeArray(next(addresses), BLOCK) for i in range(100)})
    sites = ["list"] * 200 + ["closure"] * 100 + ["trainer"] * 100
    return [(BASE + i * BLOCK, BLOCK, site) for i, site in enumerate(sites)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objects", type=int, default=1000000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    holders = load_holders()
    started = time.perf_counter()
    records = build_heap(args.objects)
    blocks = build_arrays()
    print("built %d records, %d objects tracked by gc, in %.1f s" % (
        records, len(gc.get_objects()), time.perf_counter() - started))
    seconds, found = [], None
    for _ in range(args.rounds):
        found = holders.find_holders(blocks, budget_s=10.0)
        seconds.append(found["seconds"])
    print("python %s, %d rounds: median %.3f s, min %.3f s, max %.3f s" % (
        sys.version.split()[0], args.rounds, statistics.median(seconds), min(seconds), max(seconds)))
    print("objects examined %d, exposing %d, levels %d, complete %s, note %s" % (
        found["objects"], found["exposing"], found["levels"], found["complete"], found["note"]))
    for key, entries in found["held_by"].items():
        for entry in entries:
            print("  %-8s %4d blocks  %s  e.g. %s" % (key, entry["blocks"], entry["holder"], entry["example"]))
    print("holders: %d objects, median %.3f s (target <= 2 s)" % (found["objects"], statistics.median(seconds)))


if __name__ == "__main__":
    main()
