"""Two ranks under torchrun, each with tracepool as PyTorch's allocator (tests/gpu/run.sh, step 5d):

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m tracepool run -o DIR/report.json ranks_check.py
    python -m tracepool merge -o DIR/merged.json DIR/report-rank*.json
    python ranks_check.py compare DIR

Run by torchrun, rank r keeps (r + 1) * 4 blocks of 1 MiB in CUDA tensors at the line marked "kept",
and frees a 16 MiB scratch tensor every step (on a machine of one GPU both ranks use it). `compare`
checks that each rank wrote a report of its own naming its rank, that the merged view holds the kept
line with 4 and 8 MiB and names rank 1 as holding the most, and prints one STATUS|step|detail row.
"""
import json
import os
import sys

MiB = 1 << 20
STEP = "ranks: torchrun, two ranks, one report each and a merged view"


def work():
    import torch

    rank = int(os.environ["RANK"])
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    kept = []
    for step in range(4 * (rank + 1)):
        kept.append(torch.empty(MiB, dtype=torch.uint8, device=device))  # kept
        scratch = torch.empty(16 * MiB, dtype=torch.uint8, device=device)
        del scratch
    torch.cuda.synchronize(device)
    return kept


def compare(directory):
    reports = {}
    for rank in (0, 1):
        path = os.path.join(directory, "report-rank%d.json" % rank)
        if not os.path.exists(path):
            return "FAIL|%s|no %s; the directory holds %s" % (STEP, path, sorted(os.listdir(directory)))
        reports[rank] = json.load(open(path))
        process = reports[rank].get("process", {})
        if process.get("rank") != rank or process.get("world_size") != 2:
            return "FAIL|%s|%s names process %s" % (STEP, path, process)
    if os.path.exists(os.path.join(directory, "report.json")):
        return "FAIL|%s|report.json written too: the ranks shared a path" % STEP
    merged = json.load(open(os.path.join(directory, "merged.json")))
    line = next(n for n, text in enumerate(open(__file__), 1) if text.rstrip().endswith("# kept"))
    where = "ranks_check.py:%d in work" % line
    sites = [s for s in merged["sites"] if s["where"].split(" [")[0] == where]  # tagged [torch] by the plugin
    if len(sites) != 1:
        return "FAIL|%s|merged view has %d sites at %s; sites: %s" % (
            STEP, len(sites), where, [s["where"] for s in merged["sites"]][:6])
    site = sites[0]
    if site["live_bytes"] != [4 * MiB, 8 * MiB] or site["most_live"] != "rank 1":
        return "FAIL|%s|%s: live %s, most %s" % (STEP, where, site["live_bytes"], site["most_live"])
    backends = {r["backend"] for r in merged["reports"]}
    pids = [r["pid"] for r in merged["reports"]]
    return "PASS|%s|report-rank0.json and report-rank1.json (pids %s, backend %s); merged: %s holds %s and %s, most on %s (%.2fx the mean)" % (
        STEP, pids, "/".join(sorted(backends)), where, "4.00 MiB", "8.00 MiB", site["most_live"], site["imbalance"])


if __name__ == "__main__":
    if sys.argv[1:2] == ["compare"]:
        print(compare(sys.argv[2]))
    else:
        held = work()
