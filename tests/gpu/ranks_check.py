"""Two ranks under torchrun, each with tracepool as PyTorch's allocator, and where nvidia-smi's memory
went (tests/gpu/run.sh, step 5d):

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m tracepool run -o DIR/report.json ranks_check.py
    python -m tracepool merge -o DIR/merged.json DIR/report-rank*.json
    python ranks_check.py compare DIR

Run by torchrun, rank r keeps (r + 1) * 4 blocks of 1 MiB in CUDA tensors at the line marked "kept",
and frees a 16 MiB scratch tensor every step (on a machine of one GPU both ranks use it). `compare`
checks that each rank wrote a report of its own naming its rank, that the merged view holds the kept
line with 4 and 8 MiB and names rank 1 as holding the most, and prints one STATUS|step|detail row.

    python -m tracepool run ranks_check.py accounting OUT.json
    python ranks_check.py compare-accounting OUT.json

holds 1 GiB in tensors and runs a cuBLAS matmul, starts another process that holds 512 MiB with
PyTorch's own allocator, then takes a report between two calls of torch.cuda.mem_get_info and reads
nvidia-smi (its total and its process table); `compare-accounting` checks that the report's device
section (Note [Where the memory went]) splits the driver's used bytes into tracepool's reserved bytes
and the rest, that its used bytes are within 1% of what mem_get_info says, and (a second row) that its
list of processes gives this process and the other one what nvidia-smi's process table does, within 1%.
"""
import json
import os
import sys

MiB = 1 << 20
STEP = "ranks: torchrun, two ranks, one report each and a merged view"
ACCOUNTING = "nvidia-smi accounting: driver used = tracepool reserved + outside"
BY_PROCESS = "nvidia-smi accounting by process (NVML): this process, another, the driver's own"
OTHER_PROCESS = ("import sys, torch; x = torch.empty(512 << 20, dtype=torch.uint8, device='cuda'); "
                 "torch.cuda.synchronize(); print('ready', flush=True); sys.stdin.read()")


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


def accounting(out):
    import subprocess

    import torch

    import tracepool

    device = torch.device("cuda", 0)
    held = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    a = torch.randn(2048, 2048, device=device)
    b = a @ a  # cuBLAS: its handle and workspace
    torch.cuda.synchronize(device)
    # Another process on the device, with PyTorch's own allocator: 512 MiB and its context.
    other = subprocess.Popen([sys.executable, "-c", OTHER_PROCESS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env=dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=""), text=True)
    ready = other.stdout.readline().strip() == "ready"
    before = torch.cuda.mem_get_info(device)
    report = json.loads(tracepool.report("json"))
    after = torch.cuda.mem_get_info(device)
    apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True).stdout
    smi_apps = {int(pid): int(used) << 20 for pid, used in
                (line.split(",") for line in apps.splitlines() if line.count(",") == 1 and line.split(",")[1].strip().isdigit())}
    bus = getattr(torch.cuda.get_device_properties(device), "pci_bus_id", None)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id,memory.used,memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    smi_used = None
    lines = [[x.strip() for x in line.split(",")] for line in smi.splitlines() if line.count(",") == 2]
    for bus_id, used, _ in lines:
        if (bus is None and len(lines) == 1) or (bus is not None and int(bus_id.split(":")[1], 16) == bus):
            smi_used = int(used) << 20
    json.dump({"device": report["devices"][0], "stats": report["stats"]["0"], "mem_get_info": [before, after],
               "nvidia_smi_used": smi_used, "pid": os.getpid(), "other_pid": other.pid if ready else None,
               "nvidia_smi_apps": smi_apps}, open(out, "w"))
    other.communicate("")  # after nvidia-smi's figures, which then still count it
    del held, b


def compare_accounting(path):
    try:
        d = json.load(open(path))
    except (OSError, ValueError) as e:
        return "FAIL|%s|%s" % (ACCOUNTING, e)
    dev, reserved = d["device"], d["stats"]["reserved_bytes.all.current"]
    torch_used = [total - free for free, total in d["mem_get_info"]]
    expected = sum(torch_used) / 2
    gib = lambda n: "%.3f GiB" % (n / (1 << 30))  # noqa: E731
    detail = "driver used %s of %s = tracepool reserved %s + outside %s; torch.cuda.mem_get_info used %s; nvidia-smi used %s" % (
        gib(dev["used_bytes"]), gib(dev["total_bytes"]), gib(reserved), gib(dev["outside_bytes"]), gib(expected),
        gib(d["nvidia_smi_used"]) if d["nvidia_smi_used"] is not None else "not read")
    ok = (dev["used_bytes"] == reserved + dev["outside_bytes"] and reserved >= 1 << 30 and dev["outside_bytes"] > 0
          and abs(dev["used_bytes"] - expected) <= 0.01 * expected)
    return "%s|%s|%s (target: within 1%% of mem_get_info)" % ("PASS" if ok else "FAIL", ACCOUNTING, detail)


def compare_processes(path):
    """The device's used bytes by process (NVML's list) against nvidia-smi's process table."""
    try:
        d = json.load(open(path))
    except (OSError, ValueError) as e:
        return "FAIL|%s|%s" % (BY_PROCESS, e)
    dev, reserved, smi = d["device"], d["stats"]["reserved_bytes.all.current"], d["nvidia_smi_apps"]
    listed = {p["pid"]: p["used_bytes"] for p in dev.get("processes") or []}
    if not listed:
        return "FAIL|%s|no processes listed: %s" % (BY_PROCESS, dev.get("processes_note") or "no note")
    mine, other = listed.get(d["pid"]), listed.get(d["other_pid"])
    unlisted = dev["used_bytes"] - sum(v or 0 for v in listed.values())
    near = lambda a, b: a is not None and b is not None and abs(a - b) <= max(0.01 * b, 2 * MiB)  # noqa: E731
    mib = lambda n: "%.0f MiB" % (n / MiB) if n is not None else "none"  # noqa: E731
    detail = ("this process %s (nvidia-smi %s; tracepool reserved %s), the other process %s (nvidia-smi %s), "
              "in no process %s; %d listed" % (mib(mine), mib(smi.get(str(d["pid"]))), mib(reserved), mib(other),
                                               mib(smi.get(str(d["other_pid"]))), mib(unlisted), len(listed)))
    ok = (near(mine, smi.get(str(d["pid"]))) and near(other, smi.get(str(d["other_pid"]))) and mine >= reserved
          and other >= 512 * MiB and unlisted >= 0)
    return "%s|%s|%s (target: each within 1%% of nvidia-smi's process table)" % ("PASS" if ok else "FAIL", BY_PROCESS, detail)


if __name__ == "__main__":
    if sys.argv[1:2] == ["compare"]:
        print(compare(sys.argv[2]))
    elif sys.argv[1:2] == ["accounting"]:
        accounting(sys.argv[2])
    elif sys.argv[1:2] == ["compare-accounting"]:
        print(compare_accounting(sys.argv[2]))
        print(compare_processes(sys.argv[2]))
    else:
        held = work()
