"""No CUDA context on a device a rank never used (issue 31, item 1; Note [No context as a side effect] in
core/backend/backend.h). Needs two GPUs (the nvidia-h100-x2 kind); tests/gpu/run.sh runs it:

    CUDA_DEVICE_ORDER=PCI_BUS_ID TRACEPOOL_REPORT=DIR/exit.json python -m torch.distributed.run --standalone --nproc-per-node 2 \\
        contexts_check.py DIR
    python contexts_check.py compare DIR

Each rank makes tracepool PyTorch's allocator, uses only its own device (LOCAL_RANK), and after each of
what once made a context on every device (a report, an out-of-memory error with its report, the
TRACEPOOL_REPORT exit report) reads nvidia-smi's process table: its pid must be listed on its own
device alone. Then rank 0 uses the other device on purpose, the control: nvidia-smi must list it there
too, or the check could not have seen a context. `compare` prints one STATUS|step|detail row.
"""
import ctypes
import json
import os
import subprocess
import sys

STEP = "no context on the other rank's GPU (2 ranks)"
MiB = 1 << 20


def devices_by_bus_id():
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30).stdout
    found = {}
    for line in out.splitlines():
        index, bus = (x.strip() for x in line.split(","))
        found[bus.lower()] = int(index)
    return found


def listed_on(pid, devices):
    """The devices (nvidia-smi's indices) whose process table lists `pid`."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_bus_id", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30).stdout
    where = set()
    for line in out.splitlines():
        p, bus = (x.strip() for x in line.split(","))
        if int(p) == pid:
            where.add(devices.get(bus.lower(), -1))
    return sorted(where)


def rank_main(directory):
    import tracepool.torch

    tracepool.torch.install()
    import torch

    import tracepool

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    devices, pid = devices_by_bus_id(), os.getpid()
    own = local  # CUDA_DEVICE_ORDER=PCI_BUS_ID (run.sh sets it): CUDA numbers devices as nvidia-smi does
    seen = {}
    kept = [torch.empty(64 * MiB, dtype=torch.uint8, device="cuda") for _ in range(2)]
    torch.cuda.synchronize()
    seen["after using its device"] = listed_on(pid, devices)
    json.loads(tracepool.report("json"))
    text = tracepool.report("text")
    seen["after tracepool.report()"] = listed_on(pid, devices)
    try:
        torch.empty(1 << 46, dtype=torch.uint8, device="cuda")
        oom = "no error"
    except torch.OutOfMemoryError as e:
        oom = str(e).splitlines()[0]
    seen["after an out-of-memory error"] = listed_on(pid, devices)
    ctypes.CDLL(tracepool.library_path()).tracepool_write_exit_report()  # as at exit, once
    seen["after the TRACEPOOL_REPORT exit report"] = listed_on(pid, devices)
    control = None
    if rank == 0 and torch.cuda.device_count() > 1:
        other = (local + 1) % torch.cuda.device_count()
        torch.ones(1, device="cuda:%d" % other).sum().item()
        control = listed_on(pid, devices)
    result = {"rank": rank, "pid": pid, "own": own, "seen": seen, "control": control, "oom": oom,
              "report_devices": [line for line in text.splitlines() if line.startswith("device ")]}
    with open(os.path.join(directory, "contexts-rank%d.json" % rank), "w") as f:
        json.dump(result, f, indent=1)
    del kept


def compare(directory):
    results = []
    for rank in (0, 1):
        path = os.path.join(directory, "contexts-rank%d.json" % rank)
        if not os.path.exists(path):
            return "FAIL|%s|no %s" % (STEP, path)
        results.append(json.load(open(path)))
    for r in results:
        for what, where in r["seen"].items():
            if where != [r["own"]]:
                return "FAIL|%s|rank %d (pid %d, device %d) is listed on devices %s %s" % (
                    STEP, r["rank"], r["pid"], r["own"], where, what)
        if not r["oom"].startswith("CUDA out of memory"):
            return "FAIL|%s|rank %d: no out-of-memory error (%s)" % (STEP, r["rank"], r["oom"])
    control = results[0]["control"]
    if control is None or len(control) < 2:
        return "FAIL|%s|the control (rank 0 using the other device) is listed on %s: the check cannot see contexts" % (
            STEP, control)
    return "PASS|%s|each rank on its own device only after report(), an OOM and the exit report (%d checks); control: " \
           "rank 0 using both devices is listed on %s; rank 0's report: %s" % (
               STEP, sum(len(r["seen"]) for r in results), control, " / ".join(results[0]["report_devices"])[:300])


if __name__ == "__main__":
    if sys.argv[1] == "compare":
        print(compare(sys.argv[2]))
    else:
        rank_main(sys.argv[1])
