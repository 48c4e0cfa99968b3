"""Copies between two devices of tracepool's memory (issue 18: growable segments map memory with
cuMemMap, which cudaDeviceEnablePeerAccess does not cover; map() grants every peer-capable device
access). Needs two GPUs (the nvidia-h200-x2 kind); prints one STATUS|step|detail row.

    python peer_check.py [TRACEPOOL_CONF]

Each device allocates, then copies to the other: Tensor.to (cudaMemcpyAsync with peer access on),
copy_ into a tensor of the other device, a non-contiguous copy (a kernel that reads the peer's memory
directly), and all of it again after torch enabled peer access. The results must equal the sources.
"""
import json
import sys

STEP = "peer copies between two devices"


def main():
    conf = sys.argv[1] if len(sys.argv) > 1 else ""
    import tracepool
    import tracepool.torch

    tracepool.torch.install(conf)
    import torch

    if torch.cuda.device_count() < 2:
        print("SKIP|%s (%s)|%d device(s)" % (STEP, conf or "defaults", torch.cuda.device_count()))
        return 0
    checked, peer = 0, torch.cuda.can_device_access_peer(0, 1)
    for src, dst in ((0, 1), (1, 0)):
        for n in (1 << 10, 3 << 20, 45 << 20):  # small pool, large pool, several 20 MiB pieces
            x = torch.arange(n, dtype=torch.float32, device="cuda:%d" % src)
            y = x.to("cuda:%d" % dst)
            z = torch.empty(n, device="cuda:%d" % dst)
            z.copy_(x)
            m = x.view(-1, 2)[:, 0]  # strided: copied by a kernel
            w = m.to("cuda:%d" % dst)
            torch.cuda.synchronize(src)
            torch.cuda.synchronize(dst)
            back = x.cpu()
            for got in (y, z):
                if not torch.equal(got.cpu(), back):
                    print("FAIL|%s (%s)|%d -> %d, %d floats: copy differs" % (STEP, conf or "defaults", src, dst, n))
                    return 1
            if not torch.equal(w.cpu(), back.view(-1, 2)[:, 0]):
                print("FAIL|%s (%s)|%d -> %d, %d floats: strided copy differs" % (STEP, conf or "defaults", src, dst, n))
                return 1
            checked += 3
    devices = json.loads(tracepool.report(format="json"))["devices"]
    print("PASS|%s (%s)|%d copies equal both ways (peer access %s); segments: %s" % (
        STEP, conf or "defaults", checked, "possible" if peer else "not possible",
        ", ".join("cuda:%d %s" % (d["device"], d.get("segments")) for d in devices)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
