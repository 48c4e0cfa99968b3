"""Reports for the HTML report's tests and benchmark, made by real programs on the host backend.

`big_report` makes the size the HTML report is held to: 100,000 live blocks from 5,000 call sites
(each a Python function of its own in a generated module, so each has its own file line), with marks
between rounds so that some sites grow.
"""

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
