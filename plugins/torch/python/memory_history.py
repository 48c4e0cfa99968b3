"""PyTorch's own history calls over tracepool's history (plugins/torch/python/memory_history.py,
installed as tracepool.torch.memory_history).

``torch.cuda.memory._record_memory_history()`` (and its legacy form with a bool first) reaches PyTorch's
allocator through ``torch._C._cuda_record_memory_history``; with tracepool installed,
:func:`tracepool.torch.install` points that function, ``_cuda_record_memory_history_legacy`` and
``_cuda_isHistoryEnabled`` here. The arguments mean what PyTorch documents:

- ``enabled``: None stops recording and forgets the history; ``"state"`` keeps only what is allocated
  now (no history of events); ``"all"`` also records every alloc, free, segment and OOM event.
- ``context``: which entries carry a call stack: None none; ``"state"`` the blocks allocated now;
  ``"alloc"`` those and the allocation events; ``"all"`` the free events too, each with the stack that
  freed (a stack capture at each free). Events keep what was asked when they were recorded; the blocks
  allocated now show their stacks unless the last call said None.
- ``stacks``: ``"python"`` keeps the Python frames (files ending in ``.py``: Python, TorchScript,
  inductor), ``"all"`` the native frames too.
- ``max_entries``: the events kept, the newest; tracepool keeps them in a ring of at most
  :data:`MAX_ENTRIES` (PyTorch's default, ``sys.maxsize``, means that many).
- ``clear_history``: forget the events recorded so far.
- ``skip_actions``: event kinds (``"alloc"``, ``"free_requested"``, ``"segment_alloc"``, ...) left out of
  the snapshot's device traces (they are recorded, so they still take room in the ring).
- ``compile_context``: each event carries the compiled region it ran in (``"Torch-Compiled Region: 0/0"``,
  ``"N/A"`` outside one); ``global_record_annotations``: record_function annotations of every thread.
  Both need tracepool's allocator class (libtracepool_torch.so): PyTorch's own function then runs
  too (:func:`use_pytorch_function`), which installs PyTorch's profiler callbacks that tell the class
  of each compiled region; the class labels the events through tracepool's history labels, as it
  does with ``torch.cuda.memory._set_memory_metadata``'s string (``user_metadata``).

:func:`shape` applies ``enabled``, ``context`` and ``stacks`` to a snapshot before PyTorch's callers see
it. Before any of these calls, tracepool's snapshot is left as it is (device traces from
``TRACEPOOL_CONF``'s history:N, or one alloc event per live block). Nothing here needs torch.
"""

from __future__ import annotations

import threading
from typing import Any

from .. import _tracepool

MAX_ENTRIES = 1 << 22  # 4,194,304 events (192 MiB of ring, touched only as it fills)

_ENABLED = (None, "state", "all")
_CONTEXTS = (None, "state", "alloc", "all")
_STACKS = ("python", "all")

_lock = threading.Lock()
# None until PyTorch's history calls are first used; then what the last one asked for.
_settings: dict[str, Any] | None = None
# PyTorch's own torch._C._cuda_record_memory_history, where tracepool's allocator class serves it.
_pytorch_function: Any = None


def use_pytorch_function(function: Any) -> None:
    """Has :func:`record` call PyTorch's own function first (tracepool.torch.install does, with
    tracepool's allocator class): its profiler callbacks for compile contexts and annotations are then
    set up and taken down as PyTorch's allocator has them, and it tells the class's recordHistory.
    :func:`record` then sets tracepool's history itself, since the class cannot tell ``enabled="state"``
    from ``context="state"``."""
    global _pytorch_function
    _pytorch_function = function


def record(enabled: str | None = "all", context: str | None = "all", stacks: str = "all",
           max_entries: int = MAX_ENTRIES, clear_history: bool = False, compile_context: bool = False,
           global_record_annotations: bool = False, skip_actions: Any = None, *_rest: Any) -> None:
    """torch._C._cuda_record_memory_history, with the arguments the module's docstring describes."""
    global _settings
    if enabled not in _ENABLED:
        raise RuntimeError("_record_memory_history: enabled must be one of None, 'state', 'all', not %r" % (enabled,))
    if context not in _CONTEXTS:
        raise RuntimeError("_record_memory_history: context must be one of None, 'state', 'alloc', 'all', not %r"
                           % (context,))
    if stacks not in _STACKS:
        raise RuntimeError("_record_memory_history: stacks must be 'python' or 'all', not %r" % (stacks,))
    flags = _tracepool.HISTORY_CLEAR if clear_history else 0
    if context in (None, "state"):
        flags |= _tracepool.HISTORY_NO_ALLOC_SITES | _tracepool.HISTORY_NO_FREE_SITES
    else:
        flags |= _tracepool.HISTORY_FREEING_SITES if context == "all" else _tracepool.HISTORY_NO_FREE_SITES
    with _lock:
        if _pytorch_function is not None:
            _pytorch_function(enabled, context, stacks, max_entries, clear_history, compile_context,
                              global_record_annotations, list(skip_actions or ()))
        if enabled != "all":  # None and "state" keep no history of events
            _tracepool.record_history(0)
        else:
            _tracepool.record_history(max(1, min(int(max_entries), MAX_ENTRIES)), flags)
        _settings = {"enabled": enabled, "context": context, "stacks": stacks,
                     "skip": frozenset(str(a) for a in skip_actions or ())}


def record_legacy(enabled: bool, record_context: bool = True, trace_alloc_max_entries: int = 1,
                  trace_alloc_record_context: bool = False, record_context_cpp: bool = False,
                  clear_history: bool = False, compile_context: bool = False, global_record_annotations: bool = False,
                  skip_actions: Any = None, *_rest: Any) -> None:
    """torch._C._cuda_record_memory_history_legacy: _record_memory_history with a bool first."""
    if not enabled:
        record(None)
        return
    context = "all" if trace_alloc_record_context else ("state" if record_context else None)
    record("all", context, "all" if record_context_cpp else "python", trace_alloc_max_entries, clear_history,
           compile_context, global_record_annotations, skip_actions)


def enabled() -> bool:
    """torch._C._cuda_isHistoryEnabled: whether _record_memory_history turned recording on."""
    with _lock:
        return _settings is not None and _settings["enabled"] is not None


def _python_frames(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in frames if f["filename"].endswith(".py")]


def shape(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The snapshot as PyTorch's allocator would give it under the last _record_memory_history call:
    the blocks' frames unless ``context`` is None (the events' were chosen as they were recorded), only
    Python frames for ``stacks="python"``, no device traces unless ``enabled="all"``, and none of the
    ``skip_actions``. Unchanged before the first call."""
    with _lock:
        settings = None if _settings is None else dict(_settings)
    if settings is None:
        return snapshot
    keep_blocks = settings["context"] is not None

    def frames(f: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return _python_frames(f) if settings["stacks"] == "python" else f

    for segment in snapshot["segments"]:
        segment["frames"] = frames(segment["frames"]) if keep_blocks else []
        for block in segment["blocks"]:
            block["frames"] = frames(block["frames"]) if keep_blocks else []
    traces = snapshot["device_traces"] if settings["enabled"] == "all" else [[] for _ in snapshot["device_traces"]]
    snapshot["device_traces"] = [[dict(e, frames=frames(e["frames"])) for e in t if e["action"] not in settings["skip"]]
                                 for t in traces]
    return snapshot
