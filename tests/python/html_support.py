"""Reports for the HTML report's tests and benchmark, made by real programs on the host backend.

`big_report` makes the size the HTML report is held to: 100,000 live blocks from 5,000 call sites
(each a Python function of its own in a generated module, so each has its own file line), with marks
between rounds so that some sites grow.
"""

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "examples", "leaky_training.py")


def run_python(code, env=None, cwd=None):
    """Runs `code` in a child Python on the host backend; returns its CompletedProcess (checked)."""
    full_env = dict(os.environ, TRACEPOOL_CONF="backend:host")
    full_env.pop("TRACEPOOL_REPORT", None)
    full_env.update(env or {})
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def demo_report(directory):
    """The demo run as the README runs it, written as JSON and HTML; returns (json path, html path)."""
    saved, page = os.path.join(directory, "demo.json"), os.path.join(directory, "demo.html")
    env = dict(os.environ, TRACEPOOL_CONF="backend:host")
    env.pop("TRACEPOOL_REPORT", None)
    done = subprocess.run([sys.executable, "-m", "tracepool", "run", "--no-torch", "-o", saved, "--html", page, DEMO],
                          env=env, capture_output=True, text=True, timeout=600, cwd=directory)
    assert done.returncode == 0, done.stderr[-4000:]
    return saved, page


def big_report(directory, sites=5000, blocks=100_000, rounds=4):
    """A report of `blocks` live blocks from `sites` call sites; returns its JSON path."""
    module = os.path.join(directory, "many_sites.py")
    per_site = blocks // sites
    with open(module, "w") as f:
        f.write("import tracepool\n\n")
        for i in range(sites):
            f.write("def site_%d(kept, n):\n    for _ in range(n):\n        kept.append(tracepool.alloc(%d))\n\n"
                    % (i, 512 * (1 + i % 64)))
    saved = os.path.join(directory, "big.json")
    run_python("""
        import sys
        sys.path.insert(0, %r)
        import tracepool, many_sites
        kept = []
        sites, per_site, rounds = %d, %d, %d
        for r in range(rounds):
            for i in range(sites):
                # A site in ten grows at every round; the rest are made in the first round.
                n = per_site // rounds if i %% 10 == 0 else (per_site if r == 0 else 0)
                getattr(many_sites, "site_%%d" %% i)(kept, n)
            tracepool.mark("round %%d" %% r)
        tracepool.write_report(%r, holders=False)
        print(len(kept))
    """ % (directory, sites, per_site, rounds, saved))
    return saved


def long_run_report(directory, epochs=60, growing=14, steady=20, minutes=48):
    """A long GPU run's report, made on the host backend and then dressed: a training loop of `epochs`
    marks in which `growing` sites keep memory every epoch (at different rates) and `steady` sites hold
    theirs from the start; the marks' times are then stretched over `minutes` minutes, the report made
    40 s after the last mark (a large program's holder search and shutdown), and the device made an
    80 GiB GPU that two other processes share. Returns its JSON path. There is no GPU in CI, and a
    host run takes milliseconds: only the times and the device card are made up."""
    module = os.path.join(directory, "long_sites.py")
    with open(module, "w") as f:
        f.write("import tracepool\n\n")
        for i in range(growing + steady):
            f.write("def layer_%d(kept, size):\n    kept.append(tracepool.alloc(size))\n\n" % i)
    saved = os.path.join(directory, "long.json")
    run_python("""
        import sys
        sys.path.insert(0, %r)
        import tracepool, long_sites
        kept = []
        growing, steady, epochs = %d, %d, %d
        for i in range(steady):
            getattr(long_sites, "layer_%%d" %% (growing + i))(kept, (8 + 4 * i) << 20)
        for epoch in range(epochs):
            scratch = tracepool.alloc(512 << 20)
            for i in range(growing):
                getattr(long_sites, "layer_%%d" %% i)(kept, (growing - i) << 18)
            tracepool.free(scratch)
            tracepool.mark("epoch %%d" %% epoch)
        tracepool.write_report(%r, holders=False)
    """ % (directory, growing, steady, epochs, saved))
    with open(saved) as f:
        data = json.load(f)
    first, last = data["marks"][0]["time_ns"], data["marks"][-1]["time_ns"]
    start, scale = data["time_ns"] - minutes * 60 * 10**9, minutes * 60 * 10**9 / max(1, last - first)
    stretch = lambda t: start + int((t - first) * scale)
    for m in data["marks"] + data["auto_marks"]:
        m["time_ns"] = stretch(m["time_ns"])
    data["time_ns"] = stretch(last) + 40 * 10**9
    data["backend"] = "cuda"
    for d in data["devices"]:
        reserved = data["stats"][str(d["device"])]["reserved_bytes.all.current"]
        context, others = 780 << 20, [(data["process"]["pid"] + 1, 5 << 30), (data["process"]["pid"] + 2, 3 << 30)]
        d["total_bytes"], d["used_bytes"] = 80 << 30, reserved + context + sum(b for _, b in others)
        d["outside_bytes"] = d["used_bytes"] - reserved
        d["processes"] = [{"pid": pid, "used_bytes": b} for pid, b in others] + [
            {"pid": data["process"]["pid"], "used_bytes": reserved + context}]
    with open(saved, "w") as f:
        json.dump(data, f)
    return saved
