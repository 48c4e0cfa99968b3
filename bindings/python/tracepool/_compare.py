"""Reports side by side: `python -m tracepool merge` (one report per rank, or per process, as one view)
and `python -m tracepool diff` (what changed between two reports).

A site's id is its own process's; across processes (ranks, runs, commits) a call site is known by
what it is: its tags and its frames' kind, function, file and line (native addresses move with each
process's address-space layout, and are left out). A report is read by the library's own reader
first, so a file that is not a report is refused with the reader's message, as `report` refuses it.
"""

import json
import os
import statistics
import sysconfig

from ._escaping import escape

MERGE_SCHEMA = "tracepool.merge/1"
DIFF_SCHEMA = "tracepool.diff/1"
MANY_REPORTS = 8  # more than this: min, median and max columns instead of one per report
_READ_CHUNK = 16 << 20  # what an input that does not say its size (a device, a FIFO) is read by


class ReportError(Exception):
    """A file that cannot be read or is not a report: one line, exit status 2."""


def shown(value):
    """A string from a report, or a file name, as a text or a message shows it (tracepool/_escaping.py)."""
    if isinstance(value, (bytes, os.PathLike)):
        value = os.fsdecode(value)
    return escape(value if isinstance(value, str) else str(value))


def read_saved(path, max_bytes):
    """The bytes of the file at `path`; ReportError if it cannot be read or holds more than `max_bytes`
    (0: no cap). A file that says its size is refused before it is read; anything else is read until one
    byte past the cap, so that an endless input (/dev/zero) is never read whole."""
    cap, chunks, size = max_bytes or float("inf"), [], 0
    try:
        with open(path, "rb", buffering=0) as f:
            known = os.fstat(f.fileno()).st_size  # 0 for a device, a FIFO or a file under /proc
            while max(known, size) <= cap:
                want = max(known - size + 1, _READ_CHUNK)  # a regular file in one read, its end in the next
                chunk = f.read(min(want, cap + 1 - size))
                if not chunk:
                    return b"".join(chunks)  # one chunk: that very object, not a copy
                chunks.append(chunk)
                size += len(chunk)
    except OSError as e:
        raise ReportError("cannot read %s: %s" % (shown(path), e.strerror or e)) from None
    except MemoryError:
        raise ReportError("cannot read %s: not enough memory for it" % shown(path)) from None
    raise ReportError("%s is larger than the %s cap on a saved report (--max-input-size BYTES sets it, 0 lifts it)"
                      % (shown(path), human(max_bytes)))


def render_file(path, format, top, max_bytes):
    """The report saved at `path`, rendered by the library (`report`, `merge` and `diff` read files
    through it); ReportError if it cannot be read, is larger than `max_bytes` or is not a report (the
    library's message names the file and the first problem)."""
    import tracepool

    saved = read_saved(path, max_bytes)
    try:
        return tracepool.render_report(saved, format, top, name=shown(path))
    except tracepool.InvalidArgumentError as e:
        raise ReportError(str(e)) from None
    except MemoryError:  # the library's OutOfMemoryError too
        raise ReportError("cannot render %s: not enough memory for it" % shown(path)) from None


def merge_html(paths, max_bytes):
    """One HTML page of the reports at `paths` (the library's renderer): a view of each and of them all."""
    import tracepool

    saved = [read_saved(path, max_bytes) for path in paths]
    try:
        names = [shown(p) for p in paths]
        return tracepool._tracepool.render_html(saved, names)
    except tracepool.InvalidArgumentError as e:
        raise ReportError(str(e)) from None
    except MemoryError:
        raise ReportError("cannot render %d reports: not enough memory for them" % len(paths)) from None


def load(path, max_bytes):
    """The report saved at `path`, as the library reads it (normalised JSON, as a dict)."""
    return json.loads(render_file(path, "json", None, max_bytes))


def _library_dirs():
    paths = sysconfig.get_paths()
    dirs = {paths.get("stdlib"), paths.get("platstdlib"), paths.get("purelib"), paths.get("platlib")}
    dirs.add(os.path.dirname(os.path.abspath(__file__)))  # tracepool's own command line
    return tuple(os.path.join(d, "") for d in dirs if d)


_LIBRARY_DIRS = _library_dirs()


def _is_library(frame):
    file = frame.get("file") or ""
    return (
        file.startswith("<frozen ")
        or "/site-packages/" in file
        or "/dist-packages/" in file
        or file.startswith(_LIBRARY_DIRS)
    )


def site_key(site):
    """What a call site is, whatever process it was interned in."""
    frames = tuple((f.get("kind"), f.get("function"), f.get("file"), f.get("line")) for f in site.get("frames", []))
    return tuple(site.get("tags", [])), frames


def where(site):
    """A line naming the site: its innermost Python frame outside libraries, else its innermost frame."""
    frames = site.get("frames", [])
    python = [f for f in frames if f.get("kind") == "python"]
    chosen = next((f for f in python if not _is_library(f)), python[0] if python else None)
    if chosen is None:
        chosen = next((f for f in frames if f.get("function") and not f.get("interpreter")), None)
    if chosen is None:
        return "(no call site known)" if not frames else "(unknown frames)"
    text = chosen.get("function") or "?"
    if chosen.get("file"):
        text = "%s:%s in %s" % (os.path.basename(chosen["file"]), chosen.get("line") or "?", text)
    tags = site.get("tags", [])
    return text + (" [%s]" % "/".join(tags) if tags else "")


def human(n):
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return "%s%.2f %s" % (sign, n / size, unit)
    return "%s%d B" % (sign, n)


def signed(n):
    return ("+" if n > 0 else "") + human(n)


def _stat(report, name):
    return sum(int(per_device.get(name, 0)) for per_device in report.get("stats", {}).values())


def totals(report):
    """Allocated, reserved and cached bytes over the report's devices."""
    return {
        "allocated_bytes": _stat(report, "allocated_bytes.all.current"),
        "reserved_bytes": _stat(report, "reserved_bytes.all.current"),
        "cached_bytes": sum(int(d.get("cached_bytes", 0)) for d in report.get("devices", [])),
    }


def _sites(report, section):
    """{site key: (bytes, site)} of one section, sites that are one stack in this report summed."""
    out = {}
    for site in report.get(section, []):
        key = site_key(site)
        held, first = out.get(key, (0, site))
        out[key] = (held + int(site.get("bytes", 0)), first)
    return out


def _labels(paths, reports):
    ranks = [r.get("process", {}).get("rank") for r in reports]
    if None not in ranks and len(set(ranks)) == len(ranks):
        return ["rank %d" % r for r in ranks]
    return [os.path.basename(p) for p in paths]


# ---- merge -------------------------------------------------------------------------------------


def merge(paths, max_bytes):
    """The merged view of the reports at `paths` (a dict of schema tracepool.merge/1); `max_bytes` as
    read_saved's."""
    def by_rank(loaded):  # ranks in order, then reports without one, by file
        rank = loaded[1].get("process", {}).get("rank")
        return rank is None, rank or 0, loaded[0]

    paths, reports = zip(*sorted(((p, load(p, max_bytes)) for p in paths), key=by_rank))
    labels = _labels(paths, reports)
    live = [_sites(r, "leaks") for r in reports]
    cached = [_sites(r, "cached") for r in reports]
    growing = [{site_key(s) for s in r.get("leaks", []) if s.get("growing")} for r in reports]
    keys = {}
    for per_report in live + cached:
        for key, (_, site) in per_report.items():
            keys.setdefault(key, site)
    sites = []
    for key, site in keys.items():
        held = [per.get(key, (0, None))[0] for per in live]
        free = [per.get(key, (0, None))[0] for per in cached]
        mean = statistics.fmean(held)
        most = max(range(len(held)), key=lambda i: held[i])
        sites.append({
            "where": where(site),
            "tags": site.get("tags", []),
            "frames": site.get("frames", []),
            "live_bytes": held,
            "cached_bytes": free,
            "growing": [key in g for g in growing],
            "total_live_bytes": sum(held),
            "total_cached_bytes": sum(free),
            "most_live": labels[most] if mean > 0 else None,
            "imbalance": round(held[most] / mean, 3) if mean > 0 else None,  # 1.0: every report alike
        })
    sites.sort(key=lambda s: (-s["total_live_bytes"], -s["total_cached_bytes"], s["where"]))
    entries = []
    for path, label, report in zip(paths, labels, reports):
        process = report.get("process", {})
        entries.append(dict(
            {"file": path, "label": label, "reason": report.get("reason"), "backend": report.get("backend"),
             "pid": process.get("pid"), "host": process.get("host"), "rank": process.get("rank"),
             "world_size": process.get("world_size"),
             "live_bytes": sum(int(s.get("bytes", 0)) for s in report.get("leaks", []))},
            **totals(report)))
    return {"schema": MERGE_SCHEMA, "reports": entries, "sites": sites}


def _columns(values, labels):
    if len(values) <= MANY_REPORTS:
        return list(zip(labels, (human(v) for v in values)))
    return [("min", human(min(values))), ("median", human(statistics.median(values))), ("max", human(max(values)))]


def merge_text(merged, top):
    reports = merged["reports"]
    labels = [shown(r["label"]) for r in reports]
    worlds = {r["world_size"] for r in reports if r["world_size"]}
    out = ["== tracepool merge: %d reports%s" % (len(reports), " of a world of %d" % worlds.pop() if len(worlds) == 1
                                                  else "")]
    for label, r in zip(labels, reports):
        who = "pid %s on %s" % (r["pid"], shown(r["host"])) if r["pid"] else "process not recorded"
        out.append("  %-10s %s, %s: %s live, %s reserved, %s cached  (%s)" % (
            label, who, shown(r["reason"]), human(r["live_bytes"]), human(r["reserved_bytes"]),
            human(r["cached_bytes"]), shown(r["file"])))
    held = [r["live_bytes"] for r in reports]
    if len(reports) > 1 and max(held) > min(held):
        hi = max(range(len(held)), key=lambda i: held[i])
        lo = min(range(len(held)), key=lambda i: held[i])
        out.append("\nImbalance: %s holds %s more live memory than %s (%s against %s)" % (
            labels[hi], human(held[hi] - held[lo]), labels[lo], human(held[hi]), human(held[lo])))
        gaps = sorted(merged["sites"], key=lambda s: -(s["live_bytes"][hi] - s["live_bytes"][lo]))
        for s in [s for s in gaps if s["live_bytes"][hi] > s["live_bytes"][lo]][:3]:
            out.append("  %s at %s" % (signed(s["live_bytes"][hi] - s["live_bytes"][lo]), shown(s["where"])))
    for title, field, total in (("Live memory by call site, across reports, largest total first", "live_bytes",
                                 "total_live_bytes"),
                                ("Cached memory by the call site that last used it", "cached_bytes",
                                 "total_cached_bytes")):
        listed = [s for s in merged["sites"] if s[total] > 0]
        listed.sort(key=lambda s: -s[total])
        out.append("\n%s:" % title)
        if not listed:
            out.append("  none")
        for s in listed[:top]:
            columns = "  ".join("%s %s" % c for c in _columns(s[field], labels))
            line = "  %10s  %s\n      %s" % (human(s[total]), shown(s["where"]), columns)
            if field == "live_bytes" and s["imbalance"] is not None and len(reports) > 1:
                line += "  (most: %s, %.2fx the mean)" % (shown(s["most_live"]), s["imbalance"])
            grown = [labels[i] for i, g in enumerate(s["growing"]) if g]
            if field == "live_bytes" and grown:
                line += "\n      GROWING on %s" % ", ".join(grown)
            out.append(line)
        if len(listed) > top:
            out.append("  ... %d more sites (--top)" % (len(listed) - top))
    return "\n".join(out) + "\n"


# ---- diff --------------------------------------------------------------------------------------


def diff(before_path, after_path, max_bytes):
    """Per-site change in live and cached bytes from one report to another (schema tracepool.diff/1);
    `max_bytes` as read_saved's."""
    before, after = load(before_path, max_bytes), load(after_path, max_bytes)
    rows = {}
    for side, report in ((0, before), (1, after)):
        for section, field in (("leaks", "live"), ("cached", "cached")):
            for key, (held, site) in _sites(report, section).items():
                row = rows.setdefault(key, {"where": where(site), "tags": site.get("tags", []),
                                            "frames": site.get("frames", []), "live": [0, 0], "cached": [0, 0]})
                row[field][side] = held
    sites = []
    for row in rows.values():
        live, cached = row.pop("live"), row.pop("cached")
        row.update(live_before=live[0], live_after=live[1], live_change=live[1] - live[0],
                   cached_before=cached[0], cached_after=cached[1], cached_change=cached[1] - cached[0],
                   status="new" if live[0] == cached[0] == 0 else "gone" if live[1] == cached[1] == 0 else "both")
        sites.append(row)
    sites.sort(key=lambda s: (-(abs(s["live_change"]) + abs(s["cached_change"])), s["where"]))
    t0, t1 = totals(before), totals(after)
    return {"schema": DIFF_SCHEMA, "before": before_path, "after": after_path,
            "totals": {name: {"before": t0[name], "after": t1[name], "change": t1[name] - t0[name]} for name in t0},
            "sites": sites}


def diff_text(d, top):
    out = ["== tracepool diff: %s -> %s" % (shown(d["before"]), shown(d["after"]))]
    for name, label in (("allocated_bytes", "allocated"), ("reserved_bytes", "reserved"), ("cached_bytes", "cached")):
        t = d["totals"][name]
        out.append("  %-9s %s -> %s (%s)" % (label, human(t["before"]), human(t["after"]), signed(t["change"])))
    changed = [s for s in d["sites"] if s["live_change"] or s["cached_change"]]
    out.append("\nChanged call sites, largest change first (live, then cached):")
    if not changed:
        out.append("  none")
    for s in changed[:top]:
        mark = {"new": " (new)", "gone": " (gone)"}.get(s["status"], "")
        out.append("  live %s, cached %s  %s%s\n      live %s -> %s, cached %s -> %s" % (
            signed(s["live_change"]), signed(s["cached_change"]), shown(s["where"]), mark, human(s["live_before"]),
            human(s["live_after"]), human(s["cached_before"]), human(s["cached_after"])))
    if len(changed) > top:
        out.append("  ... %d more sites (--top)" % (len(changed) - top))
    return "\n".join(out) + "\n"
