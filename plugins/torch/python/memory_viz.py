"""The PyTorch memory-snapshot export: tracepool's memory in the layout of
``torch.cuda.memory._snapshot()``, and the pickle pytorch.org/memory_viz opens
(plugins/torch/python/memory_viz.py, installed as tracepool.torch.memory_viz).

The library writes the snapshot as JSON (``tracepool_torch_snapshot_string``); here it becomes the
dictionary PyTorch's own tools read (``torch.cuda._memory_viz``: segsum, trace, trace_plot,
segment_plot) and the pickle pytorch.org/memory_viz opens. Nothing here needs torch.

The viewer reads pickles itself, in JavaScript (``unpickle`` in MemoryViz.js): protocols 2 to 4
only, and a fixed opcode subset (:data:`VIEWER_OPCODES`). A pickle of plain dicts, lists, tuples,
str, int, float, bool and None at protocol 4 stays inside it; protocol 5 (Python 3.14's default)
and any class instance (an OrderedDict, say) do not.
"""

from __future__ import annotations

import json
import os
import pickle
from typing import Any

from .. import _tracepool

PICKLE_PROTOCOL = 4

# The opcodes MemoryViz.js's unpickle() handles (pickletools names).
VIEWER_OPCODES = frozenset({
    "PROTO", "FRAME", "STOP", "MARK", "EMPTY_DICT", "DICT", "EMPTY_LIST", "LIST", "APPEND", "APPENDS",
    "SETITEM", "SETITEMS", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "BININT", "BININT1",
    "BININT2", "LONG1", "BINFLOAT", "SHORT_BINUNICODE", "BINUNICODE", "NONE", "NEWTRUE", "NEWFALSE",
    "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET",
})


def _int(value: Any) -> int:
    """An address, size or stream: JSON gives an integer, or a "0x..." string for a wide address."""
    if isinstance(value, str):
        return int(value, 0)
    return int(value or 0)


def _frame(f: dict[str, Any]) -> dict[str, Any]:
    return {"filename": str(f.get("filename") or "??"), "line": int(f.get("line") or 0),
            "name": str(f.get("name") or "??")}


def _frames(frames: Any) -> list[dict[str, Any]]:
    return [_frame(f) for f in frames or ()]


def _block(b: dict[str, Any]) -> dict[str, Any]:
    size = _int(b.get("size"))
    return {"address": _int(b.get("address")), "size": size,
            "requested_size": _int(b.get("requested_size", size)), "state": str(b.get("state", "inactive")),
            "frames": _frames(b.get("frames"))}


def _segment(s: dict[str, Any]) -> dict[str, Any]:
    pool = s.get("segment_pool_id") or (0, 0)
    return {"device": int(s.get("device", 0)), "address": _int(s.get("address")),
            "total_size": _int(s.get("total_size")), "allocated_size": _int(s.get("allocated_size")),
            "active_size": _int(s.get("active_size")), "requested_size": _int(s.get("requested_size")),
            "stream": _int(s.get("stream")), "segment_type": str(s.get("segment_type", "large")),
            "segment_pool_id": (int(pool[0]), int(pool[1])),  # a tuple in torch's snapshot
            "is_expandable": bool(s.get("is_expandable", False)), "frames": _frames(s.get("frames")),
            "blocks": [_block(b) for b in s.get("blocks") or ()]}


_TRACE_INTEGERS = ("addr", "size", "stream", "time_us", "device_free")


def _trace_entry(e: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"action": str(e.get("action", ""))}
    for key in _TRACE_INTEGERS:
        if key in e:
            out[key] = _int(e[key])
    for key in ("category", "compile_context", "user_metadata"):
        if key in e:
            out[key] = str(e[key])
    out["frames"] = _frames(e.get("frames"))
    return out


def from_dict(doc: dict[str, Any]) -> dict[str, Any]:
    """The snapshot dictionary from tracepool's JSON document (already parsed).

    Every value becomes a plain dict, list, tuple, str, int or bool, as in ``_snapshot()``.
    ``device_traces`` gets one list per device up to the highest device that holds a segment,
    since the viewer indexes it by device.
    """
    segments = [_segment(s) for s in doc.get("segments") or ()]
    traces = [[_trace_entry(e) for e in device or ()] for device in doc.get("device_traces") or ()]
    devices = max((s["device"] for s in segments), default=-1) + 1
    traces.extend([] for _ in range(devices - len(traces)))
    return {"segments": segments, "device_traces": traces,
            "allocator_settings": dict(doc.get("allocator_settings") or {}),
            "external_annotations": list(doc.get("external_annotations") or [])}


def from_json(text: str) -> dict[str, Any]:
    """The snapshot dictionary from the JSON text of ``tracepool._tracepool.torch_snapshot_json()``."""
    return from_dict(json.loads(text))


def without_traces(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The snapshot with empty device traces (``memory_snapshot(include_traces=False)``)."""
    return dict(snapshot, device_traces=[[] for _ in snapshot["device_traces"]])


def dumps(snapshot: dict[str, Any]) -> bytes:
    """The pickle the viewer reads: protocol 4, never 5."""
    return pickle.dumps(snapshot, protocol=PICKLE_PROTOCOL)


def dump(snapshot: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Writes the pickle to ``path`` as tracepool writes its reports (``tracepool.write_file``):
    a file replaced atomically, or a device or FIFO written straight; raises ``tracepool.Error``."""
    _tracepool.write_file(os.fsencode(path), dumps(snapshot))
