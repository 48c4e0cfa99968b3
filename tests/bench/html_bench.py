"""How long the HTML report takes to draw 100,000 live blocks from 5,000 call sites in headless Chromium
(the target: under 2 s), beside the demo's small report as the baseline of what loading any page costs.

    python tests/bench/html_bench.py [--rounds R]

Makes both reports with the installed package on the host backend (tests/python/html_support.py),
renders them as HTML, then opens each R times, alternating, in one browser; a figure is the time from
navigation to the page saying it is drawn (performance.now() then). Prints the median, min and max of
each and their ratio. Measures and prints; asserts nothing about speed.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import browser  # noqa: E402
import html_support  # noqa: E402

TARGET_MS = 2000


def page_of(saved, directory, name):
    html = os.path.join(directory, name + ".html")
    subprocess.run([sys.executable, "-m", "tracepool", "report", saved, "--format", "html", "-o", html], check=True,
                   capture_output=True)
    return html


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    executable = browser.find_chromium()
    if executable is None:
        sys.exit("html_bench: no Chromium (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as directory:
        big = page_of(html_support.big_report(directory), directory, "big")
        small = page_of(html_support.demo_report(directory)[0], directory, "demo")
        times = {"demo": [], "big": []}
        with browser.Browser(executable) as b:
            for _ in range(options.rounds):
                for name, path in (("demo", small), ("big", big)):
                    b.open(path)
                    times[name].append(b.evaluate("performance.now()"))
            assert not b.errors, b.errors
        size = os.path.getsize(big)
    for name, values in times.items():
        print("html %-5s drawn in median %.0f ms (min %.0f, max %.0f) over %d rounds" % (
            name, statistics.median(values), min(values), max(values), len(values)))
    big_ms, demo_ms = statistics.median(times["big"]), statistics.median(times["demo"])
    print("html: 100,000 blocks, 5,000 sites (%.1f MiB page): median %.0f ms, %.2fx the demo's page, %.2fx the "
          "target of %d ms: %s" % (size / (1 << 20), big_ms, big_ms / demo_ms, big_ms / TARGET_MS, TARGET_MS,
                                   "meets" if big_ms <= TARGET_MS else "misses"))


if __name__ == "__main__":
    main()
