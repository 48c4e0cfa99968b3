"""Work that runs the program's own code and must not hold up a report past its budget: the holder search
asks the program's objects how they show device memory (Note [Bounded search] in _holders.py), and such
code may block on a lock, a hung device or a sleep. Standard library only.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

_left_behind: list[threading.Thread] = []  # work still running past its deadline: one at most, unless calls race


class StillRunning(Exception):
    """Work an earlier call left behind is still running: no other is started beside it."""


def run_bounded(work: Callable[[], None], deadline: float) -> bool:
    """Runs work() on a daemon thread of its own and waits for it until `deadline` (a time.perf_counter()
    time) at most; True once it returned, False if it was left running (it then goes on alone, and the
    interpreter does not wait for it at exit). The waiting thread releases the GIL and holds nothing else.
    Work an earlier call left behind is waited for first, until `deadline` too; if it still runs then, this
    work is not started (StillRunning), so that code that blocks for good holds one thread, not one a call.
    Where no thread can start (at interpreter shutdown, or past a thread limit), work() runs on this one,
    as long as it takes."""
    for earlier in list(_left_behind):
        earlier.join(max(0.0, deadline - time.perf_counter()))
    _left_behind[:] = [thread for thread in _left_behind if thread.is_alive()]
    if _left_behind:
        raise StillRunning()
    worker = threading.Thread(target=work, name="tracepool holder search", daemon=True)
    try:
        worker.start()
    except RuntimeError:
        work()
        return True
    worker.join(max(0.0, deadline - time.perf_counter()))
    if not worker.is_alive():
        return True
    _left_behind.append(worker)
    return False


def describe(error: BaseException) -> str:
    """`SystemExit: 3`, for a note: an exception's str runs its own code, which may raise too."""
    try:
        return "%s: %s" % (type(error).__name__, error)
    except BaseException:
        return type(error).__name__
