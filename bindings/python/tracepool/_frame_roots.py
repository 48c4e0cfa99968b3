"""Frames as roots of the holder search (Note [Who holds it] in _holders.py): which frames are tracepool's
own, what a frame's locals are without keeping them alive, and how a frame is named. Standard library only.
"""

from __future__ import annotations

import os
import sys

_CO_OPTIMIZED = 0x0001  # a function's frame; a module or class body's frame keeps its locals in a dict
_OWN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")


def is_own_frame(frame):
    """A frame of tracepool's own Python code (the package's folder)."""
    return os.path.abspath(frame.f_code.co_filename).startswith(_OWN_DIR)


def frame_locals(frame):
    """(name, value) of a frame's locals; none for a module body, whose globals are a root already."""
    try:
        optimized = frame.f_code.co_flags & _CO_OPTIMIZED
        if not optimized and frame.f_locals is frame.f_globals:
            return []
        namespace = frame.f_locals  # 3.13: a FrameLocalsProxy, read the same way
        items = list(namespace.items())
        if optimized and sys.version_info < (3, 13) and sys.getrefcount(namespace) <= 3:
            # Before PEP 667 f_locals is a snapshot that the frame keeps until it returns: left filled, it
            # would keep what the locals refer to now alive after they change. One that a caller of
            # locals() holds (more than the frame's, ours and getrefcount's references) is left alone.
            namespace.clear()
        return items
    except Exception:
        return []


def frame_scope(frame):
    """("local", the function's qualified name, "file.py:line"): the scope a frame's locals are named in."""
    code = frame.f_code
    where = "%s:%d" % (os.path.basename(code.co_filename), frame.f_lineno or 0)
    return ("local", getattr(code, "co_qualname", code.co_name), where)
