"""The HTML report, drawn by a real browser (headless Chromium over the DevTools protocol): it renders
without an error in the console, draws what the report holds (flame graph, timeline, tables, devices,
ranks), stays text whatever the program's strings say, and keeps up with 100,000 blocks.

Screenshots go to $TRACEPOOL_SCREENSHOTS, else build/html-screenshots in the source tree. Without a
browser the tests skip, unless TRACEPOOL_REQUIRE_BROWSER=1 (CI sets it), where they fail.
"""

import json
import os
import subprocess
import sys

import pytest

import browser
import html_support
import tracepool

SCREENSHOTS = os.environ.get("TRACEPOOL_SCREENSHOTS") or os.path.join(html_support.ROOT, "build", "html-screenshots")


@pytest.fixture(scope="module")
def page():
    executable = browser.find_chromium()
    if executable is None:
        if os.environ.get("TRACEPOOL_REQUIRE_BROWSER") == "1":
            pytest.fail("no Chromium (apt-get install chromium) or no websocket-client, and TRACEPOOL_REQUIRE_BROWSER=1")
        pytest.skip("no Chromium (apt-get install chromium) or no websocket-client to draw the HTML report")
    os.makedirs(SCREENSHOTS, exist_ok=True)
    with browser.Browser(executable) as b:
        yield b


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return html_support.demo_report(str(tmp_path_factory.mktemp("demo")))


def drawn(page, path):
    """Opens the page and checks it drew without an error; returns the browser."""
    page.errors.clear()
    page.open(path)
    assert page.evaluate("document.getElementById('error').hidden"), page.evaluate(
        "document.getElementById('error').textContent")
    assert page.errors == []
    return page


def texts(page, selector):
    return page.evaluate("[...document.querySelectorAll(%s)].map((e) => e.textContent)" % json.dumps(selector))


def flame_names(page):
    return page.evaluate("tracepoolView.flame.nodes.map((v) => v.n.name)")


def test_the_demo_draws_its_growing_sites_their_stacks_and_the_cache(page, demo, tmp_path):
    saved, html = demo
    with open(saved) as f:
        data = json.load(f)
    drawn(page, html)
    page.screenshot(os.path.join(SCREENSHOTS, "demo.png"))

    # The growing table comes first, the validation outputs' site on top, named by its caller's line.
    rows = texts(page, "tr.site-row td.site")
    assert len(rows) == sum(s["growing"] for s in data["leaks"]) == 2
    assert "validate (:101)" in rows[0] and "GROWING" in rows[0], rows
    # The flame graph: the program's own lines, not the launcher's (runpy, tracepool's command line).
    names = flame_names(page)
    assert "validate (leaky_training.py:101)" in names
    assert not [n for n in names if "_cli.py" in n or "_run.py" in n or "runpy" in n], names
    total = sum(s["bytes"] for s in data["leaks"])
    assert page.evaluate("tracepoolView.flame.total") == total

    # A row opens to its whole stack.
    page.click("tr.site-row")
    stack = texts(page, "tr.stack-row")[0]
    assert "examples/leaky_training.py:101" in stack and "tracepool/shape_only.py:28" in stack, stack
    page.screenshot(os.path.join(SCREENSHOTS, "demo-row-open.png"))

    # Search: the frames that match, and the bytes under them.
    page.type_into("#flame-search", "validate")
    status = page.evaluate("document.getElementById('flame-status').textContent")
    validate_bytes = sum(s["bytes"] for s in data["leaks"] if any(f.get("function") == "validate" for f in s["frames"]))
    assert status.startswith("matched ") and "%.1f%%" % (100 * validate_bytes / total) in status, status

    # Cached memory instead of live.
    page.click("#flame-cached")
    assert page.evaluate("tracepoolView.flame.total") == sum(c["bytes"] for c in data["cached"])
    page.screenshot(os.path.join(SCREENSHOTS, "demo-cached.png"))

    # The timeline: allocated and reserved at every mark, and the growing sites' lines.
    series = page.evaluate("[...document.querySelectorAll('#timeline-box path')].map((p) => p.dataset.series)")
    assert series.count("allocated") == 1 and series.count("reserved") == 1
    assert series.count("site") >= 2, series
    assert len(texts(page, "#timeline-box svg line[stroke-dasharray='2,3']")) == len(data["marks"])
    # The device: the host backend's, emulated (test_the_host_backends_device_card_says_what_it_is).
    card = texts(page, "#devices .card")[0]
    assert "78.00 MiB reserved" in card and "emulated" in card, card


def test_what_holds_a_site_is_shown_with_it(page, demo, tmp_path):
    """The demo's stand-in tensors expose nothing Python can follow; a report whose holder search named
    one (as PyTorch's tensors are named on the GPU) shows it in the row and in its stack."""
    with open(demo[0]) as f:
        data = json.load(f)
    site = next(s for s in data["leaks"] if s["growing"])
    site["held_by"] = [{"holder": "list `val_outputs` (global in leaky_training.py)", "bytes": site["bytes"],
                        "blocks": site["blocks"], "example": "val_outputs[2]"}]
    html = tmp_path / "held.html"
    html.write_text(tracepool.render_report(json.dumps(data).encode(), "html"))
    drawn(page, str(html))
    assert "held by list `val_outputs` (global in leaky_training.py)" in texts(page, "tr.site-row td.site")[0]
    page.click("tr.site-row")
    assert "e.g. val_outputs[2]" in texts(page, "tr.stack-row")[0]


def variant(demo, tmp_path, name, change):
    """The demo's report changed by `change` (a function of the dict), rendered by the library."""
    with open(demo[0]) as f:
        data = json.load(f)
    change(data)
    html = tmp_path / (name + ".html")
    html.write_text(tracepool.render_report(json.dumps(data).encode(), "html"))
    return str(html), data


def test_reports_of_every_shape_draw_whole(page, demo, tmp_path):
    # Only cache, no marks, no time, a history: the timeline draws the history, the page opens on the cache.
    def cache_only(d):
        d["leaks"], d["retained"], d["marks"], d["auto_marks"], d["marks_made"], d["auto_marks_made"] = [], [], [], [], 0, 0
        d["growth_basis"], d["time_ns"] = "none", 0
        d["timeline"] = [{"device": 0, "points": [[10, 0, 2 << 20], [20, 1 << 20, 2 << 20], [30, 0, 2 << 20]]}]
        d["history_events"] = 3
    drawn(page, variant(demo, tmp_path, "cache_only", cache_only)[0])
    assert page.evaluate("tracepoolView.state.flameKind") == "cached" and page.evaluate("tracepoolView.flame.total") > 0
    assert "Reserved but free" in texts(page, "#table-note")[0] and texts(page, "tr.site-row")
    page.click("#table-tabs button[data-table=growing]")  # no marks: the page says how to get them
    assert 'too few marks were made to tell: mark each epoch, tracepool.mark("epoch")' in texts(page, "#table-note")[0]
    assert "allocation history: 3 events" in " ".join(texts(page, "#timeline-legend span"))

    # Pools: one holding only free memory is listed too.
    def pools(d):
        frames = d["leaks"][0]["frames"]
        d["pools"] = [{"device": 0, "pool": 7, "label": "CUDA graph", "site": 0, "frames": frames, "bytes": 0, "blocks": 0,
                       "block_bytes": 0, "reserved_bytes": 20 << 20, "cached_bytes": 20 << 20, "sites": []},
                      {"device": 0, "pool": 8, "label": "torch.cuda.MemPool", "site": 0, "frames": frames,
                       "bytes": 1 << 20, "blocks": 1, "block_bytes": 1 << 20, "reserved_bytes": 2 << 20,
                       "cached_bytes": 1 << 20, "sites": []}]
    drawn(page, variant(demo, tmp_path, "pools", pools)[0])
    page.click("#table-tabs button[data-table=pools]")
    assert [t.split(" ")[0] for t in texts(page, "tr.site-row td.site")] == ["CUDA", "torch.cuda.MemPool"]

    # An out-of-memory report says what failed before anything else.
    def oom(d):
        d["reason"] = "oom"
        d["oom"] = {"device": 0, "requested_bytes": 3 << 30, "message": "device 0 cannot hold 3.00 GiB <b>now</b>"}
    drawn(page, variant(demo, tmp_path, "oom", oom)[0])
    banner = texts(page, "#oom")[0]
    assert "out of memory on device 0, 3.00 GiB requested" in banner and "<b>now</b>" in banner, banner

    # A report of two devices from before per-device figures: a device's view says why it is empty.
    def old_two_devices(d):
        d["devices"].append(dict(d["devices"][0], device=1))
        d["stats"]["1"] = d["stats"]["0"]
        for s in d["leaks"] + d["cached"]:
            s.pop("by_device", None)
    drawn(page, variant(demo, tmp_path, "old", old_two_devices)[0])
    page.click("#views button[data-device='1']")
    assert "predates per-device figures" in texts(page, "#table-note")[0]
    assert page.errors == []


def test_zooming_in_and_back_out(page, demo):
    drawn(page, demo[1])
    rows = page.evaluate("tracepoolView.flame.nodes.length")
    # The fourth row from the top: click it, then the top row to come back to the whole graph.
    box = page.evaluate("(() => { const r = document.getElementById('flame-canvas').getBoundingClientRect();"
                        " document.getElementById('flame-canvas').scrollIntoView({block: 'center'});"
                        " const q = document.getElementById('flame-canvas').getBoundingClientRect();"
                        " return [q.left + 5, q.top]; })()")
    page.mouse(box[0], box[1] + 18 * 3 + 9)
    assert page.evaluate("tracepoolView.state.zoom") is not None
    zoomed = page.evaluate("tracepoolView.flame.nodes[0].n.name")
    page.mouse(box[0], box[1] + 9)
    assert page.evaluate("tracepoolView.state.zoom") is None, "the top row is the whole graph again"
    assert page.evaluate("tracepoolView.flame.nodes.length") == rows and zoomed.startswith("all live memory")
    assert page.errors == []


def test_sorting_and_the_other_tables(page, demo):
    drawn(page, demo[1])
    page.click("#table-tabs button[data-table=live]")
    page.click("th[data-key=blocks]")
    blocks = [int(t.replace(",", "")) for t in texts(page, "tr.site-row td:nth-child(3)")]
    assert blocks == sorted(blocks, reverse=True) and len(blocks) >= 2 and blocks[0] != blocks[-1]
    page.click("th[data-key=blocks]")
    again = [int(t.replace(",", "")) for t in texts(page, "tr.site-row td:nth-child(3)")]
    assert again == sorted(blocks)
    page.click("#table-tabs button[data-table=cached]")
    assert texts(page, "tr.site-row") and "Reserved but free" in texts(page, "#table-note")[0]
    page.click("#table-tabs button[data-table=retained]")
    assert "marks survived" in texts(page, "th") and texts(page, "tr.site-row")


def test_program_strings_stay_text(page, tmp_path):
    hostile = "</script><img src=x onerror=\"window.pwned=1\"><script>window.pwned=2</script>"
    saved = tmp_path / "hostile.json"
    html_support.run_python("""
        import tracepool
        with tracepool.tag(%r):
            kept = tracepool.alloc(4096)
        tracepool.mark("%s")
        tracepool.write_report(%r, holders=False)
    """ % (hostile, "<b>mark</b>", str(saved)))
    html = tmp_path / "hostile.html"
    html.write_text(tracepool.render_report(saved.read_bytes(), "html"))
    drawn(page, str(html))
    assert page.evaluate("window.pwned === undefined")
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    page.click("#table-tabs button[data-table=live]")
    assert any(hostile in t for t in texts(page, "tr.site-row td.site"))


def test_ranks_and_devices_have_views_of_their_own(page, tmp_path):
    for rank in (0, 1):
        html_support.run_python("""
            import tracepool
            kept = [tracepool.alloc(%d << 20, device=0), tracepool.alloc(%d << 20, device=1)]
            tracepool.write_report(%r, holders=False)
        """ % (1 + rank, 3 + rank, str(tmp_path / "report.json")),
            env={"TRACEPOOL_CONF": "backend:host,host_devices:2", "RANK": str(rank), "LOCAL_RANK": str(rank),
                 "WORLD_SIZE": "2"})
    files = [str(tmp_path / ("report-rank%d.json" % r)) for r in (0, 1)]
    html = str(tmp_path / "ranks.html")
    done = subprocess.run([sys.executable, "-m", "tracepool", "merge", "--format", "html", "-o", html] + files,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    drawn(page, html)
    page.screenshot(os.path.join(SCREENSHOTS, "ranks.png"))
    buttons = texts(page, "#views button")
    assert buttons == ["all ranks", "rank 0", "rank 1", "all", "device 0", "device 1"], buttons
    # All ranks: one branch of the flame graph each, and a device card per rank and device.
    assert {"rank 0", "rank 1"} <= set(flame_names(page))
    assert len(texts(page, "#devices .card")) == 4
    page.click("#table-tabs button[data-table=live]")
    assert page.evaluate("tracepoolView.flame.total") == (1 + 3 + 2 + 4) << 20
    # One rank, one device: the figures of that device only.
    page.click("#views button[data-report='1']")
    page.click("#views button[data-device='1']")
    assert page.evaluate("tracepoolView.flame.total") == 4 << 20
    assert texts(page, "tr.site-row td:nth-child(2)") == ["4.00 MiB"]
    assert len(texts(page, "#devices .card")) == 1
    page.screenshot(os.path.join(SCREENSHOTS, "ranks-rank1-cuda1.png"))


def test_a_diff_page_lists_the_change_and_shows_each_report_on_its_own(page, tmp_path):
    saved = {}
    for name, sizes in (("before", "[1 << 20, 2 << 20]"), ("after", "[1 << 20, 5 << 20, 3 << 20]")):
        saved[name] = str(tmp_path / (name + ".json"))
        html_support.run_python("""
            import tracepool
            def steady(n): return tracepool.alloc(n)
            def grows(n): return tracepool.alloc(n)
            def new(n): return tracepool.alloc(n)
            sizes = %s
            kept = [steady(sizes[0]), grows(sizes[1])] + [new(n) for n in sizes[2:]]
            tracepool.write_report(%r, holders=False)
        """ % (sizes, saved[name]))
    html = str(tmp_path / "change.html")
    done = subprocess.run([sys.executable, "-m", "tracepool", "diff", "-o", html, saved["before"], saved["after"]],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    drawn(page, html)
    page.screenshot(os.path.join(SCREENSHOTS, "diff.png"))
    assert texts(page, "h1") == ["tracepool diff"]
    assert texts(page, "#views button") == ["before", "after"]  # never the two summed
    # The change first, largest first: only the sites that changed, with the text diff's figures.
    assert texts(page, "#table-tabs button.on") == ["Changed"]
    assert page.evaluate("document.querySelector('main').firstElementChild.id") == "tables"
    rows = texts(page, "tr.site-row td.site")
    assert len(rows) == 2 and rows[0].startswith("grows (") and rows[1].startswith("new (") and "NEW" in rows[1], rows
    assert texts(page, "tr.site-row td:nth-child(2)") == ["+3.00 MiB", "+3.00 MiB"]
    assert texts(page, "tr.site-row td:nth-child(3)") == ["2.00 MiB", "0 B"]
    note = page.evaluate("document.getElementById('table-note').textContent")
    assert "allocated 3.00 MiB \u2192 9.00 MiB (+6.00 MiB)" in note and "2 call sites changed" in note, note
    page.click("tr.site-row")
    assert "grows (" in texts(page, "tr.stack-row")[0]
    # Each report is a view of its own: the later one first, the earlier one a click away.
    assert page.evaluate("tracepoolView.flame.total") == 9 << 20
    page.click("#views button[data-report='0']")
    assert page.evaluate("tracepoolView.flame.total") == 3 << 20
    page.click("#table-tabs button[data-table=live]")
    assert len(texts(page, "tr.site-row")) == 2
    assert page.errors == []


def test_with_the_allocation_history_the_timeline_follows_every_event(page, tmp_path):
    saved = tmp_path / "history.json"
    html_support.run_python("""
        import tracepool
        kept = []
        for epoch in range(3):
            for step in range(20):
                scratch = tracepool.alloc(3 << 20)
                kept.append(tracepool.alloc(1 << 20))
                tracepool.free(scratch)
            tracepool.mark("epoch %%d" %% epoch)
        tracepool.write_report(%r, holders=False)
    """ % str(saved), env={"TRACEPOOL_CONF": "backend:host,history:10000"})
    data = json.loads(saved.read_text())
    points = data["timeline"][0]["points"]
    assert data["history_events"] == len(points) >= 120
    html = tmp_path / "history.html"
    html.write_text(tracepool.render_report(saved.read_bytes(), "html"))
    drawn(page, str(html))
    page.screenshot(os.path.join(SCREENSHOTS, "history-timeline.png"))
    legend = " ".join(texts(page, "#timeline-legend span"))
    assert "allocation history: %d events" % len(points) in legend, legend
    drawn_points = page.evaluate("document.querySelector('#timeline-box path[data-series=allocated]')"
                                 ".getAttribute('d').split(/[ML]/).length - 1")
    assert drawn_points == 2 * len(points) - 1, "a step after every event"
    # Its highest allocated figure is the run's peak: the scratch block on top of everything kept.
    assert max(p[1] for p in points) == data["stats"]["0"]["allocated_bytes.all.peak"]


def test_a_hundred_thousand_blocks_draw_and_are_all_there(page, tmp_path):
    saved = html_support.big_report(str(tmp_path))
    html = str(tmp_path / "big.html")
    done = subprocess.run([sys.executable, "-m", "tracepool", "report", saved, "--format", "html", "-o", html],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    drawn(page, html)
    ready = page.evaluate("performance.now()")
    print("100,000 blocks, 5,000 sites: drawn %.0f ms after navigation (tests/bench/html_bench.py times it)" % ready)
    page.screenshot(os.path.join(SCREENSHOTS, "big.png"), full_page=False)
    assert page.evaluate("tracepoolView.flame.root.sites") == 5000
    page.click("#table-tabs button[data-table=live]")
    assert "5,000 rows" in texts(page, "#table-note")[0]
    assert len(texts(page, "tr.site-row")) == 200
    page.click("button.more")
    assert len(texts(page, "tr.site-row")) == 5000
    assert page.errors == []


def test_the_exit_report_is_a_page_when_its_path_says_html(page, tmp_path):
    html = tmp_path / "exit.html"
    html_support.run_python("""
        import tracepool
        kept = tracepool.alloc(5 << 20)
    """, env={"TRACEPOOL_REPORT": str(html)})
    drawn(page, str(html))
    assert page.evaluate("tracepoolView.reports") == 1
    assert "Leaked: memory still allocated at exit" in texts(page, "#table-note")[0]
    assert texts(page, "tr.site-row td:nth-child(2)") == ["5.00 MiB"]


def test_an_html_path_that_cannot_be_written_at_the_end_goes_to_the_temporary_folder(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "demo.py"  # the demo, whose output folder goes away while it runs
    script.write_text("import os, runpy\nos.rmdir(%r)\nrunpy.run_path(%r, run_name='__main__')\n" % (str(out), html_support.DEMO))
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, TRACEPOOL_CONF="backend:host", TMPDIR=str(tmp_path / "tmp"))
    done = subprocess.run([sys.executable, "-m", "tracepool", "run", "--no-torch", "--html", str(out / "r.html"),
                           str(script)], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 1
    assert "GROWING across marks" in done.stderr, "the text report is printed first"
    pages = list((tmp_path / "tmp").glob("tracepool-report-*.html"))
    assert len(pages) == 1, done.stderr[-500:]
    assert "cannot write %s" % (out / "r.html") in done.stderr and "went to %s instead" % pages[0] in done.stderr
    assert pages[0].read_text().startswith("<!DOCTYPE html>")


def test_what_is_not_a_report_gets_a_clear_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "tracepool.report/1", "stats": {}, "leaks": [{"bytes": -1}], "cached": [], "marks": []}')
    done = subprocess.run([sys.executable, "-m", "tracepool", "report", str(bad), "--format", "html", "-o",
                           str(tmp_path / "x.html")], capture_output=True, text=True)
    assert done.returncode == 2
    assert "bad.json" in done.stderr and "leaks[0]" in done.stderr, done.stderr
    assert not (tmp_path / "x.html").exists()
    done = subprocess.run([sys.executable, "-m", "tracepool", "merge", "--format", "html", str(bad), str(bad)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "bad.json" in done.stderr, done.stderr


def test_the_page_names_each_site_as_the_text_merge_and_diff_do(page, demo):
    """One report through the four renderings (Note [Site titles]): the page's rows, the text's retained
    lines, merge and diff name each site by the same title, the library's."""
    saved, html = demo
    with open(saved, "rb") as f:
        raw = f.read()
    data = json.loads(raw)
    titles = [s["title"] for s in data["leaks"]]
    assert len(set(titles)) == len(titles), titles
    merged = json.loads(tracepool._tracepool.merge_reports([raw, raw], ["a.json", "b.json"], "json"))
    assert sorted(s["title"] for s in merged["sites"] if s["total_live_bytes"]) == sorted(titles)
    diff = json.loads(tracepool._tracepool.diff_reports(raw, raw, ["a.json", "b.json"], "json"))
    assert set(titles) <= {s["title"] for s in diff["sites"]}
    text = tracepool.render_report(raw, "text")
    retained = [t for t in titles if "       at %s\n" % t in text]
    assert retained, text  # the demo's kept outputs outlive its marks
    drawn(page, html)
    page.click("#table-tabs button[data-table=live]")
    rows = texts(page, "tr.site-row td.site")
    assert len(rows) == len(titles)
    for title in titles:
        assert any(row.startswith(title) for row in rows), (title, rows)


def test_memory_seen_outside_the_pool_is_on_its_device_card(page, demo, tmp_path):
    """A device whose runtime told tracepool of memory got elsewhere (tracepool_observe_alloc) says how much."""
    def observed(data):
        data["devices"][0]["observed_bytes"] = 3 << 20
        data["devices"][0]["observed_host_bytes"] = 1 << 20
    html, _ = variant(demo, tmp_path, "observed", observed)
    drawn(page, html)
    card = texts(page, "#devices .card")[0]
    assert "seen outside the pool (by the interposer, or told through tracepool_observe_alloc): 3.00 MiB on the device, 1.00 MiB pinned host" in card, card


# ---- What the page looks like (issue 35, item 8): a short run, a long one, the host backend's device ----

def boxes(page, selector):
    """The page's boxes [x, y, width, height, text] of the SVG elements `selector` names."""
    return page.evaluate("[...document.querySelectorAll(%s)].map((e) => { const b = e.getBBox();"
                         " return [b.x, b.y, b.width, b.height, e.textContent]; })" % json.dumps(selector))


def overlapping(boxes):
    return [(a[4], b[4]) for i, a in enumerate(boxes) for b in boxes[i + 1:]
            if a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]]


def mark_xs(page):
    return page.evaluate("[...document.querySelectorAll('#timeline-box line[stroke-dasharray=\"2,3\"]')]"
                         ".map((l) => Number(l.getAttribute('x1')))")


def axis_width(page):
    grid = page.evaluate("[...document.querySelectorAll('#timeline-box line.grid')].map((l) => "
                         "[Number(l.getAttribute('x1')), Number(l.getAttribute('x2'))])")
    return grid[0][1] - grid[0][0]


def lab(color):
    """CIE L*a*b* of "#rrggbb" (sRGB, D65), to tell how far apart two colours look."""
    def linear(c):
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (linear(int(color[i:i + 2], 16)) for i in (1, 3, 5))
    xyz = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047, 0.2126 * r + 0.7152 * g + 0.0722 * b, \
        (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    f = [t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116 for t in xyz]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    return html_support.long_run_report(str(tmp_path_factory.mktemp("long")))


def test_a_short_run_spreads_its_marks_over_the_axis_and_names_them_all(page, demo, tmp_path):
    """A report made long after the last mark (here 100 times the marks' span: a holder search, work
    that allocates nothing) sits past a break; the marks keep the axis (Note [Timeline axis])."""
    def late(d):
        first, last = d["marks"][0]["time_ns"], d["marks"][-1]["time_ns"]
        d["time_ns"] = last + 100 * (last - first)
    html, data = variant(demo, tmp_path, "late", late)
    drawn(page, html)
    page.screenshot(os.path.join(SCREENSHOTS, "short-run.png"))
    xs = mark_xs(page)
    assert len(xs) == len(data["marks"]) == 3
    assert max(xs) - min(xs) > 0.6 * axis_width(page), (xs, axis_width(page))
    labels = boxes(page, "#timeline-box text.mark-label")
    assert [b[4] for b in labels] == [m["label"] for m in data["marks"]] and not overlapping(labels), labels
    ticks = texts(page, "#timeline-box text.tick")
    assert ticks[-1].startswith("report, ") and ticks[-1].endswith(" later"), ticks
    assert not overlapping(boxes(page, "#timeline-box text.tick"))


def test_a_long_run_names_its_marks_evenly_and_its_sites_in_colours_apart(page, long_run, tmp_path):
    html = tmp_path / "long.html"
    with open(long_run, "rb") as f:
        raw = f.read()
    data = json.loads(raw)
    html.write_text(tracepool.render_report(raw, "html"))
    drawn(page, str(html))
    page.screenshot(os.path.join(SCREENSHOTS, "long-run.png"))
    # Sixty marks: every k-th named, none overlapping, and the marks over the whole axis.
    labels = boxes(page, "#timeline-box text.mark-label")
    assert 5 <= len(labels) < 60 and not overlapping(labels), labels
    shown = [int(b[4].split()[1]) for b in labels]
    stride = shown[1] - shown[0]
    assert shown == list(range(0, 60, stride))[:len(shown)] and stride in (2, 5, 10), shown
    xs = mark_xs(page)
    assert max(xs) - min(xs) > 0.9 * axis_width(page)
    # Six sites drawn, each in a colour of its own, told apart from each other and from allocated and
    # reserved (CIE76 distance over 20); the legend's swatches are the lines' colours.
    strokes = page.evaluate("[...document.querySelectorAll('#timeline-box path')].map((p) => "
                            "[p.dataset.series, p.getAttribute('stroke')])")
    assert [s for s, _ in strokes].count("site") == 6, strokes
    colours = [c for _, c in strokes]
    assert len(set(colours)) == len(colours) == 8
    closest = min(sum((p - q) ** 2 for p, q in zip(lab(a), lab(b))) ** 0.5
                  for i, a in enumerate(colours) for b in colours[i + 1:])
    assert closest > 20, (closest, colours)
    swatches = page.evaluate("[...document.querySelectorAll('#timeline-legend i')].map((i) => i.dataset.color)")
    assert sorted(swatches) == sorted(colours)
    growing = sum(s["growing"] for s in data["leaks"])
    assert "28 more sites with a series (%d growing)" % (growing - 6) in " ".join(texts(page, "#timeline-legend .detail"))
    # A GPU's card keeps its driver and NVML figures.
    assert "by process (NVML's list)" in texts(page, "#devices .card")[0]

    # A burst of marks, then long epochs: the marks are spaced evenly, their labels still apart.
    for i, m in enumerate(data["marks"]):
        m["time_ns"] = data["marks"][0]["time_ns"] + (i * 10**6 if i < 50 else (i - 49) * 300 * 10**9)
    data["auto_marks"] = []
    uneven = tmp_path / "uneven.html"
    uneven.write_text(tracepool.render_report(json.dumps(data).encode(), "html"))
    drawn(page, str(uneven))
    xs = mark_xs(page)
    assert max(xs) - min(xs) > 0.9 * axis_width(page)
    assert max(b - a for a, b in zip(xs, xs[1:])) - min(b - a for a, b in zip(xs, xs[1:])) < 0.5, xs
    assert "spaced evenly" in " ".join(texts(page, "#timeline-legend .detail"))
    assert not overlapping(boxes(page, "#timeline-box text.mark-label"))
    assert not overlapping(boxes(page, "#timeline-box text.tick"))


def test_the_host_backends_device_card_says_what_it_is(page, demo):
    """An emulated device: no driver, NVML or nvidia-smi to quote, and a bar of what it handed out
    rather than an empty bar of its 16 GiB capacity."""
    drawn(page, demo[1])
    assert texts(page, "#summary-title") == ["Where the emulated device's memory went"]
    card = texts(page, "#devices .card")[0]
    assert "emulated in host memory" in card and "of its 16.00 GiB capacity" in card, card
    assert "NVML" not in card and "nvidia-smi" not in card and "driver:" not in card, card
    filled = page.evaluate("(() => { const bar = document.querySelector('#devices .bar');"
                           " return [...bar.children].reduce((w, s) => w + s.getBoundingClientRect().width, 0) /"
                           " bar.getBoundingClientRect().width; })()")
    assert filled > 0.99, filled
