"""Python frames in call sites: the exact file, line and function of the Python code that allocated and
of its callers, whichever way the allocation arrives (ctypes and the extension both release the GIL;
a worker thread; a frameless thread that borrows frames during backward), without deadlocking against
threads that hold the GIL, and without crashing while Python exits."""

import _thread
import ctypes
import inspect
import json
import os
import subprocess
import threading
import time

import pytest

import tracepool
from conftest import Report, working_tool
from tracepool import _tracepool


def marked_line(function, marker):
    """The number of the only line of `function`'s source that contains `marker`."""
    lines, first = inspect.getsourcelines(function)
    found = [first + i for i, text in enumerate(lines) if marker in text]
    assert len(found) == 1, (function, marker, found)
    return found[0]


def frame_at(function, marker, borrowed=False):
    """The Python frame a report gives for `function` at the line marked `marker`."""
    return (function.__code__.co_filename, marked_line(function, marker), function.__qualname__, borrowed)


def next_line(borrowed=False):
    """The Python frame a report gives for the caller's next line."""
    caller = inspect.currentframe().f_back
    return (caller.f_code.co_filename, caller.f_lineno + 1, caller.f_code.co_qualname, borrowed)


def leak_through_ctypes(c_api, nbytes):
    ptr = ctypes.c_void_p()
    status = c_api.tracepool_malloc(c_api.tracepool_default(), nbytes, 0, None, ctypes.byref(ptr))  # [malloc]
    assert status == 0, status
    return ptr.value


# ---- Allocations through ctypes (the GIL released), as PyTorch's CUDAPluggableAllocator makes them ----


def allocate_on_the_main_thread(c_api):
    return leak_through_ctypes(c_api, 4096)  # [main calls]


def test_a_ctypes_allocation_names_its_python_line_and_every_caller(c_api, report):
    calls = next_line()
    allocate_on_the_main_thread(c_api)
    frames = Report.python_frames(report().site("leaks", "allocate_on_the_main_thread"))
    assert frames[:3] == [
        frame_at(leak_through_ctypes, "[malloc]"),
        frame_at(allocate_on_the_main_thread, "[main calls]"),
        calls,
    ]


def allocate_on_a_worker_thread(c_api):
    leak_through_ctypes(c_api, 8192)  # [worker calls]


def test_a_worker_threads_allocation_carries_the_workers_own_frames(c_api, report):
    worker = threading.Thread(target=allocate_on_a_worker_thread, args=(c_api,))
    worker.start()
    worker.join()
    frames = Report.python_frames(report().site("leaks", "allocate_on_a_worker_thread"))
    assert frames[:2] == [frame_at(leak_through_ctypes, "[malloc]"), frame_at(allocate_on_a_worker_thread, "[worker calls]")]
    # Then threading's own frames that ran the target, and nothing of the main thread's stack.
    assert [f[2] for f in frames[2:]] == ["Thread.run", "Thread._bootstrap_inner", "Thread._bootstrap"]
    assert all(f[0] == threading.__file__ for f in frames[2:])
    assert all(f[3] is False for f in frames)


# ---- Allocations through the extension (tracepool.alloc releases the GIL around tracepool_malloc) ----


def allocate_through_the_extension():
    return tracepool.alloc(12288)  # [alloc]


def test_an_extension_allocation_names_its_python_line_and_callers(report):
    calls = next_line()
    allocate_through_the_extension()
    site = report().site("leaks", "allocate_through_the_extension")
    frames = Report.python_frames(site)
    assert frames[:2] == [
        frame_at(allocate_through_the_extension, "[alloc]"),
        calls,
    ]
    # The extension's own frames are dropped like libtracepool.so's: it is tracepool too.
    extension = os.path.realpath(_tracepool.__file__)
    assert not [f for f in site["frames"] if f["kind"] == "native" and f["module"] == extension]


def allocate_with_python_frames_off():
    return tracepool.alloc(20480)


def test_python_frames_can_be_turned_off_and_on(report):
    _tracepool._set_python_frames(False)
    try:
        allocate_with_python_frames_off()
    finally:
        _tracepool._set_python_frames(True)
    assert report().sites("leaks", "allocate_with_python_frames_off") == []
    allocate_with_python_frames_off()
    assert len(report().sites("leaks", "allocate_with_python_frames_off")) == 1


def test_names_beyond_ascii_come_out_as_utf8(report):
    # A file name beyond the BMP (4-byte str) and a function name in the BMP (2-byte str), as compiled.
    file = "/nowhere/m\U0001d518_\u540d\u524d.py"
    source = "def allocate_\u00fcn\u00ef_\u540d\u524d():\n    return tracepool.alloc(36864)\n"
    namespace = {"tracepool": tracepool}
    exec(compile(source, file, "exec"), namespace)
    function = namespace["allocate_\u00fcn\u00ef_\u540d\u524d"]
    function()
    assert Report.python_frames(report().site("leaks", function.__qualname__))[0] == (file, 2, function.__qualname__,
                                                                                     False)


# ---- Borrowed frames: a thread with a thread state but no Python frames (PyTorch's autograd threads) ----


def allocate_on_a_frameless_thread(c_api, nbytes):
    """Runs tracepool_malloc as a thread's whole body: _thread calls the ctypes function from C, so that
    thread has a thread state and no Python frame, like the autograd engine's."""
    ptr = ctypes.c_void_p()
    _thread.start_new_thread(c_api.tracepool_malloc, (c_api.tracepool_default(), nbytes, 0, None, ctypes.byref(ptr)))
    deadline = time.monotonic() + 60
    while ptr.value is None:
        assert time.monotonic() < deadline, "the frameless thread did not allocate"
        time.sleep(0.001)
    return ptr.value


def run_backward(c_api, nbytes):
    _tracepool._backward_begin()  # [outer begin]
    try:
        run_nested_backward(c_api, nbytes)  # [outer calls inner]
        allocate_on_a_frameless_thread(c_api, nbytes)  # the outer run's frames again
    finally:
        _tracepool._backward_end()


def run_nested_backward(c_api, nbytes):
    _tracepool._backward_begin()  # [inner begin]
    try:
        allocate_on_a_frameless_thread(c_api, nbytes)
    finally:
        _tracepool._backward_end()


def lend_through_a_wrapper(c_api, nbytes):
    wrapper_that_lends(c_api, nbytes)  # [calls the wrapper]


def wrapper_that_lends(c_api, nbytes):
    _tracepool._backward_begin(1)  # as tracepool.torch's wrapper of autograd's engine calls it
    try:
        allocate_on_a_frameless_thread(c_api, nbytes)
    finally:
        _tracepool._backward_end()


def test_backward_begin_can_leave_out_the_wrappers_own_frame(c_api, report):
    lend_through_a_wrapper(c_api, 24576)
    frames = Report.python_frames(report().site("leaks", "lend_through_a_wrapper"))
    assert frames[0] == frame_at(lend_through_a_wrapper, "[calls the wrapper]", borrowed=True)
    assert all(f[2] != "wrapper_that_lends" for f in frames)


def test_a_frameless_thread_borrows_the_frames_of_the_newest_backward_run(c_api, report):
    calls = next_line(borrowed=True)
    run_backward(c_api, 40960)
    sites = report().sites("leaks", "run_backward")
    by_innermost = {Report.python_frames(s)[0][2]: Report.python_frames(s) for s in sites}
    assert sorted(by_innermost) == ["run_backward", "run_nested_backward"]
    assert by_innermost["run_nested_backward"][:3] == [
        frame_at(run_nested_backward, "[inner begin]", borrowed=True),
        frame_at(run_backward, "[outer calls inner]", borrowed=True),
        calls,
    ]
    assert by_innermost["run_backward"][:2] == [
        frame_at(run_backward, "[outer begin]", borrowed=True),
        calls,
    ]


def test_after_backward_ends_a_frameless_thread_has_no_python_frames(c_api, report):
    before = {s["site"] for s in report().data["leaks"]}
    allocate_on_a_frameless_thread(c_api, 53251)
    new = [s for s in report().data["leaks"] if s["site"] not in before]
    assert len(new) == 1
    assert new[0]["bytes"] == 53251
    assert Report.python_frames(new[0]) == []


def test_backward_end_without_begin_on_this_thread_raises():
    with pytest.raises(RuntimeError, match="_backward_begin"):
        _tracepool._backward_end()


# ---- Capture never waits for the GIL ----

GATE_SOURCE = r"""
#include <stdatomic.h>
#include <stddef.h>
#include <time.h>

typedef int (*malloc_fn)(void*, size_t, int, void*, void**);

static int within(const struct timespec* start, int seconds) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec - start->tv_sec <= seconds;
}

/* Called with the GIL released (ctypes.CDLL): says it is in, waits for the other thread to hold the GIL,
   then allocates. */
int allocate_when_told(malloc_fn tracepool_malloc, void* tp, size_t size, void** out, atomic_int* step) {
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  atomic_store(step, 1);
  while (atomic_load(step) != 2)
    if (!within(&start, 60)) return -100;
  const int status = tracepool_malloc(tp, size, 0, NULL, out);
  atomic_store(step, 3);
  return status;
}

/* Called with the GIL held (ctypes.PyDLL): tells the other thread to allocate and waits for it, at most
   `seconds`. 1: the allocation finished while this thread held the GIL. */
int hold_gil_while_other_allocates(atomic_int* step, int seconds) {
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  atomic_store(step, 2);
  while (atomic_load(step) != 3)
    if (!within(&start, seconds)) return 0;
  return 1;
}
"""


@pytest.fixture(scope="session")
def gate(tmp_path_factory):
    """A C helper that lets one thread allocate while another provably holds the GIL."""
    compiler = working_tool("cc", "gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the gate helper")
    folder = tmp_path_factory.mktemp("gate")
    (folder / "gate.c").write_text(GATE_SOURCE)
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(folder / "gate.so"), str(folder / "gate.c")],
                   check=True)
    released, held = ctypes.CDLL(str(folder / "gate.so")), ctypes.PyDLL(str(folder / "gate.so"))
    released.allocate_when_told.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                            ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int)]
    held.hold_gil_while_other_allocates.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    return released, held


def allocate_behind_the_gate(c_api, allocate_when_told, step, result):
    ptr = ctypes.c_void_p()
    malloc_fn = ctypes.cast(c_api.tracepool_malloc, ctypes.c_void_p)
    result.append(allocate_when_told(malloc_fn, c_api.tracepool_default(), 28672, ctypes.byref(ptr), step))  # [gate]


def test_an_allocation_finishes_with_its_frames_while_another_thread_holds_the_gil(c_api, gate, report):
    released, held = gate
    step, result = ctypes.c_int(0), []
    worker = threading.Thread(target=allocate_behind_the_gate, args=(c_api, released.allocate_when_told, step, result))
    worker.start()
    while step.value != 1:  # the worker is inside C, without the GIL
        time.sleep(0.001)
    finished = held.hold_gil_while_other_allocates(ctypes.byref(step), 30)
    worker.join()
    assert finished == 1, "the allocation waited for the GIL"
    assert result == [0]
    frames = Report.python_frames(report().site("leaks", "allocate_behind_the_gate"))
    assert frames[0] == frame_at(allocate_behind_the_gate, "[gate]")


# ---- Bounded runs in a child process: no deadlock, no crash at exit ----


CHURN = """\
import ctypes, json, sys, threading
import tracepool

def load(loader):
    lib = loader(tracepool.library_path())
    lib.tracepool_default.restype = ctypes.c_void_p
    lib.tracepool_malloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                                     ctypes.POINTER(ctypes.c_void_p)]
    lib.tracepool_free.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    return lib

released = load(ctypes.CDLL)  # ctypes releases the GIL around each call
held = load(ctypes.PyDLL)     # and keeps it around each call of a PyDLL
libc_with_gil = ctypes.PyDLL(None)
sys.setswitchinterval(1e-5)
ROUNDS = 400
stop = threading.Event()

def churn(lib):
    tp = lib.tracepool_default()
    ptr = ctypes.c_void_p()
    for _ in range(ROUNDS):
        assert lib.tracepool_malloc(tp, 1024, 0, None, ctypes.byref(ptr)) == 0
        assert lib.tracepool_free(tp, ptr, None) == 0
    assert lib.tracepool_malloc(tp, 1024, 0, None, ctypes.byref(ptr)) == 0  # kept: its site is looked up

def churn_gil_released():
    churn(released)

def churn_gil_held():
    churn(held)

def churn_extension():
    for _ in range(ROUNDS):
        tracepool.free(tracepool.alloc(2048))
    tracepool.alloc(2048)

def spin_in_python():
    while not stop.is_set():
        pass

def hold_gil_in_c():
    while not stop.is_set():
        libc_with_gil.usleep(1000)

workers = [threading.Thread(target=f) for f in [churn_gil_released] * 3 + [churn_gil_held, churn_extension] * 2]
busy = [threading.Thread(target=spin_in_python), threading.Thread(target=hold_gil_in_c)]
for t in busy + workers:
    t.start()
for t in workers:
    t.join()
stop.set()
for t in busy:
    t.join()
sites = json.loads(tracepool.report("json"))["leaks"]
print(json.dumps([[f["function"] for f in s["frames"] if f["kind"] == "python"] for s in sites]))
"""


def test_threads_allocating_under_heavy_gil_contention_finish_with_their_frames(run_python):
    child = run_python(CHURN, timeout=60)
    assert child.returncode == 0, child.stderr
    python_stacks = json.loads(child.stdout)
    for worker in ["churn_gil_released", "churn_gil_held", "churn_extension"]:
        mine = [s for s in python_stacks if worker in s]
        assert mine, (worker, python_stacks)
        for stack in mine:
            assert stack[stack.index(worker) + 1 :] == ["Thread.run", "Thread._bootstrap_inner", "Thread._bootstrap"]


EXIT = """\
import atexit, ctypes, os, threading

def allocate_after_tracepools_handler():
    tracepool.alloc(256)
    tracepool.write_report(os.environ["TRACEPOOL_REPORT"] + ".late.json")  # the exit report is written

atexit.register(allocate_after_tracepools_handler)  # before tracepool registers its own: runs after them
import tracepool

lib = ctypes.CDLL(tracepool.library_path())
lib.tracepool_default.restype = ctypes.c_void_p
lib.tracepool_malloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                                 ctypes.POINTER(ctypes.c_void_p)]
lib.tracepool_free.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
running = threading.Barrier(5)

def allocate_forever_through_ctypes():
    tp = lib.tracepool_default()
    ptr = ctypes.c_void_p()
    running.wait()
    while True:
        lib.tracepool_malloc(tp, 4096, 0, None, ctypes.byref(ptr))
        lib.tracepool_free(tp, ptr, None)

def allocate_forever_through_the_extension(alloc=tracepool.alloc, free=tracepool.free):
    running.wait()
    while True:
        free(alloc(4096))

def allocate_at_exit():
    tracepool.alloc(512)  # registered after tracepool's own handler, so it runs before it: frames kept

for target in [allocate_forever_through_ctypes, allocate_forever_through_the_extension] * 2:
    threading.Thread(target=target, daemon=True).start()
atexit.register(allocate_at_exit)
running.wait()
"""


def test_daemon_threads_allocating_while_python_exits_do_not_crash_it(run_python, tmp_path, report):
    # Several runs: the daemons are at a different point of their allocations each time Python exits.
    for attempt in range(5):
        exit_report = tmp_path / f"exit{attempt}.json"
        child = run_python(EXIT, timeout=60, env={"TRACEPOOL_REPORT": str(exit_report)})
        assert child.returncode == 0, (attempt, child.returncode, child.stderr)
        leaks = report(exit_report.read_text())
        at_exit = leaks.site("leaks", "allocate_at_exit")
        assert Report.python_frames(at_exit)[0][1:3] == (marked_line_in(EXIT, "tracepool.alloc(512)"), "allocate_at_exit")
        # After tracepool's atexit handlers: the exit report is written (the block is not in it), and
        # the capture of Python frames is off for good.
        assert [s for s in leaks.data["leaks"] if s["bytes"] == 256] == []
        later = report((tmp_path / f"exit{attempt}.json.late.json").read_text())
        [late] = [s for s in later.data["leaks"] if s["bytes"] == 256]
        assert Report.python_frames(late) == []


def marked_line_in(source, marker):
    """The number of the only line of `source` that contains `marker`."""
    found = [i for i, text in enumerate(source.splitlines(), 1) if marker in text]
    assert len(found) == 1, (marker, found)
    return found[0]
