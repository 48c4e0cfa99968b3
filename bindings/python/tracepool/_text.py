"""The text rendering of a report (a dict of schema tracepool.report/1, docs/report-schema.md).

The layout of the C++ renderer for C hosts (core/report/report_text.cpp), line for line: the same
report gives the same text. Keep the two in step: a change to one is a change to both. A site
with Python frames is shown by its innermost Python frames, the lines its user wrote, after one
line naming the native function that asked for the memory.
"""

FRAMES_SHOWN = 5  # per site: native frames, or Python frames when it has any
SERIES_SHOWN = 8  # live bytes at the latest marks, for a growing site
MARKS_SHOWN = 12  # marks listed: the first quarter of them, then the latest
FUNCTION_WIDTH = 100
# Said after a site's first borrowed frame: its Python frames are those of the thread for which
# another thread did the work (autograd's engine thread runs backward for the thread that called it).
BORROWED = ", on the thread that started this work"


def human_bytes(n):
    """Bytes in binary units with two decimals, as the C++ human_bytes: 1.50 MiB, 512 B."""
    m = abs(n)
    if m >= 1 << 30:
        return "%.2f GiB" % (n / (1 << 30))
    if m >= 1 << 20:
        return "%.2f MiB" % (n / (1 << 20))
    if m >= 1 << 10:
        return "%.2f KiB" % (n / (1 << 10))
    return "%d B" % n


def _blocks_word(n):
    return "1 block" if n == 1 else "%d blocks" % n


def _tag_list(tags):
    return " [" + " > ".join(tags) + "]" if tags else ""


def _base_name(path):
    return path.rsplit("/", 1)[-1]


def _function_name(frame):
    fn = frame.get("function") or ""
    if fn in ("", "??"):
        fn = "??" if _is_python(frame) else frame.get("address") or "??"
    return fn[: FUNCTION_WIDTH - 3] + "..." if len(fn) > FUNCTION_WIDTH else fn


def frame_line(frame, note_borrowed=True):
    """`at function (file:line)`, else `at function (in module)`, else `at function`."""
    fn = _function_name(frame)
    file, line, module = frame.get("file"), frame.get("line"), frame.get("module")
    if file and line:
        text = "at %s (%s:%d)" % (fn, file, line)
    elif module:
        text = "at %s (in %s)" % (fn, _base_name(module))
    else:
        text = "at " + fn
    return text + BORROWED if frame.get("borrowed") and note_borrowed else text


def _is_python(frame):
    return frame.get("kind") == "python"


def _is_library(frame):
    """Python code the user did not write: installed packages, the standard library, frozen modules."""
    path = frame.get("file") or ""
    return any(p in path for p in ("/site-packages/", "/dist-packages/", "/lib/python3")) or path.startswith("<frozen")


def _python_frames(frames):
    """The Python frames, innermost first, and the index of the first that is the user's own (0 if none is)."""
    python = [f for f in frames if _is_python(f)]
    first_user = next((i for i, f in enumerate(python) if not _is_library(f)), 0)
    return python, first_user


def _entry_line(frames, python, first_user):
    """`in ...` naming what the user's line called: the innermost Python frame when library frames
    come before the user's, else the innermost native frame that is not the interpreter's own (`in
    module` where it has no name); None if there is none."""
    if first_user > 0:
        f = python[0]
        return "in %s (%s:%d)" % (_function_name(f), _base_name(f.get("file") or ""), f.get("line") or 0)
    for f in frames:
        if _is_python(f):
            return None
        if f.get("interpreter"):
            continue
        fn, module = f.get("function") or "", f.get("module")
        if fn in ("", "??"):
            return "in " + (_base_name(module) if module else _function_name(f))
        return "in %s (%s)" % (_function_name(f), _base_name(module)) if module else "in " + _function_name(f)
    return None


def _python_where(frames):
    """One line naming what was called, then the user's innermost Python lines and their callers,
    and nothing beyond a module's top level (what ran it is runpy or `python -m tracepool run`).
    Returns (lines, what is left out)."""
    python, first_user = _python_frames(frames)
    entry = _entry_line(frames, python, first_user)
    lines = [entry] if entry else []
    shown = python[first_user : first_user + FRAMES_SHOWN]
    for i, f in enumerate(shown):
        note = i == 0 or not shown[i - 1].get("borrowed")  # said once per run of borrowed frames
        lines.append(frame_line(f, note))
        if f.get("function") == "<module>":
            return lines, ""
    more = len(python) - first_user - len(shown)
    return lines, "... %d more Python frames" % more if more else ""


def _native_where(frames):
    """The innermost frames, and nothing beyond main (the C runtime's start)."""
    lines = []
    for f in frames[:FRAMES_SHOWN]:
        lines.append(frame_line(f))
        if f.get("function") == "main":
            return lines, ""
    more = len(frames) - len(lines)
    return lines, "... %d more frames" % more if more else ""


def where_lines(frames):
    """The lines that say where a site is, the last one saying what they leave out."""
    lines, more = (_python_where if any(_is_python(f) for f in frames) else _native_where)(frames)
    return lines + [more] if more else lines


def where_line(frames):
    """The one frame that names a site in a line: the user's innermost Python frame, else the innermost."""
    python, first_user = _python_frames(frames)
    return frame_line(python[first_user] if python else frames[0])


def _frames(out, frames):
    if not frames:
        out.append("       (no call site: capture was off or the site table was full)")
        return
    out.extend("       " + line for line in where_lines(frames))


def _header(report, out):
    capture = report.get("capture", {})
    sample_bytes = capture.get("sample_bytes", 0)
    head = "== tracepool report (%s): %s backend" % (report.get("reason", "demand"), report.get("backend", "?"))
    if capture.get("mode") == "off":
        head += ", call-site capture off"
    elif capture.get("mode") == "python":
        head += ", Python stacks of up to %d frames" % capture.get("python_depth", 0)
    else:
        head += ", %s stacks of up to %d frames" % (capture.get("unwinder", ""), capture.get("depth", 0))
    if capture.get("mode") != "off":
        if sample_bytes:
            head += ", sampled every %s on average: site figures are estimates" % human_bytes(sample_bytes)
        else:
            head += ", every allocation"
    out.append(head)
    if report.get("reason") == "oom":
        out.append("Out of memory: " + report.get("oom", {}).get("message", ""))
    stats = report.get("stats", {})
    for d in report.get("devices", []):
        s = stats.get(str(d["device"]), {})
        out.append(
            "device %d: %s allocated in %s (peak %s); %s reserved; %s cached (reserved but free), largest free block %s"
            % (
                d["device"],
                human_bytes(s.get("allocated_bytes.all.current", 0)),
                _blocks_word(s.get("allocation.all.current", 0)),
                human_bytes(s.get("allocated_bytes.all.peak", 0)),
                human_bytes(s.get("reserved_bytes.all.current", 0)),
                human_bytes(d.get("cached_bytes", 0)),
                human_bytes(d.get("largest_free_block", 0)),
            )
        )


def _leaks(report, top, out):
    held = "Leaked: memory still allocated at exit" if report.get("reason") == "exit" else "Live: memory allocated now"
    estimated = " (estimated)" if report.get("capture", {}).get("sample_bytes", 0) else ""
    out.append("")
    out.append("%s, by call site, largest first%s:" % (held, estimated))
    leaks = report.get("leaks", [])
    if not leaks:
        out.append("  none")
    for i, s in enumerate(leaks[:top]):
        line = "  #%d %s in %s%s" % (
            i + 1,
            human_bytes(s["bytes"]),
            _blocks_word(s["blocks"]),
            _tag_list(s.get("tags")),
        )
        if s.get("growing"):
            series = s.get("live_at_marks", [])
            line += "  GROWING across marks:" + (" ..." if len(series) > SERIES_SHOWN else "")
            line += "".join(" " + human_bytes(v) for v in series[-SERIES_SHOWN:])
        line += "  (peak %s, %s allocated in all)" % (
            human_bytes(s.get("peak_bytes", 0)),
            human_bytes(s.get("total_bytes", 0)),
        )
        out.append(line)
        _frames(out, s.get("frames", []))
    if len(leaks) > top:
        rest = sum(s["bytes"] for s in leaks[top:])
        out.append("  ... %d more sites holding %s" % (len(leaks) - top, human_bytes(rest)))


def _retained(report, top, out):
    marks = report.get("marks", [])
    if not marks:
        return
    out.append("")
    out.append("Retained: live blocks born before a mark and still alive after it:")
    retained = report.get("retained", [])
    if not retained:
        out.append("  none")
    for t in retained[:top]:
        born_after = t.get("born_after_mark")
        born = "before the first mark" if born_after is None else "after mark '%s'" % born_after
        out.append(
            "  %s in %s born %s, alive through %d mark(s)%s"
            % (
                human_bytes(t["bytes"]),
                _blocks_word(t["blocks"]),
                born,
                t.get("marks_survived", 0),
                _tag_list(t.get("tags")),
            )
        )
        if t.get("frames"):
            out.append("       " + where_line(t["frames"]))
    out.append("")
    made = report.get("marks_made", len(marks))
    if made > len(marks):
        out.append("Marks (%d made; kept: the first, the latest and %d between):" % (made, len(marks) - 2))
    else:
        out.append("Marks:")
    shown = marks
    if len(marks) > MARKS_SHOWN:
        head = MARKS_SHOWN // 4
        shown = marks[:head] + [None] + marks[len(marks) - (MARKS_SHOWN - head) :]
    for m in shown:
        if m is None:
            out.append("  ... %d more" % (len(marks) - MARKS_SHOWN))
        else:
            out.append("  %-24s %s live" % (m.get("label", ""), human_bytes(m.get("live_bytes", 0))))


def _cached(report, top, out):
    out.append("")
    out.append(
        "Cached: reserved but free (a caching allocator keeps it for reuse; empty_cache returns it), by the site "
        "that last used it:"
    )
    cached = report.get("cached", [])
    if not cached:
        out.append("  none")
    for i, c in enumerate(cached[:top]):
        out.append(
            "  #%d %s in %s free, largest %s, %s of it inside partly used segments%s"
            % (
                i + 1,
                human_bytes(c["bytes"]),
                _blocks_word(c["blocks"]),
                human_bytes(c.get("largest_free_block", 0)),
                human_bytes(c.get("inactive_split_bytes", 0)),
                _tag_list(c.get("tags")),
            )
        )
        _frames(out, c.get("frames", []))


def render(report, top=10):
    """The report as text: header, device lines, then the leaked (or live), retained and cached
    sections, `top` sites each."""
    out = []
    _header(report, out)
    _leaks(report, top, out)
    _retained(report, top, out)
    _cached(report, top, out)
    return "\n".join(out) + "\n"
