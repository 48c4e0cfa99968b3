"""Private pools in reports, through the C API (ctypes, as the PyTorch plugin calls it) on the default
instance: tracepool_pool_label refuses what it must, and a retained pool (a CUDA graph's memory) is a
group of its own in the JSON and text reports, named by its label and the Python line that created it,
its blocks no leaks; once released they are leaks again."""

import ctypes
import json

import pytest

import tracepool

OK, INVALID_ARGUMENT = 0, -1
POOL = 0x9A3F  # an id no other test uses: the default instance is the whole session's
STREAM = 0x5000  # the "capturing" stream: allocations on it go to the pool while the route is open


@pytest.fixture
def pool_api(c_api):
    """The pool functions of libtracepool.so (conftest's c_api has malloc and free)."""
    handle, device, pool = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64
    signatures = {
        "tracepool_pool_begin": [handle, device, pool, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p],
        "tracepool_pool_end": [handle, device, pool],
        "tracepool_pool_retain": [handle, device, pool],
        "tracepool_pool_release": [handle, device, pool],
        "tracepool_pool_label": [handle, device, pool, ctypes.c_char_p],
    }
    for name, argtypes in signatures.items():
        getattr(c_api, name).argtypes = argtypes
        getattr(c_api, name).restype = ctypes.c_int
    c_api.tracepool_last_error.restype = ctypes.c_char_p
    return c_api


def open_graph_pool(lib):
    assert lib.tracepool_pool_begin(lib.tracepool_default(), 0, POOL, None, STREAM, None) == OK  # [creates]


def graph_alloc(lib, nbytes):
    ptr = ctypes.c_void_p()
    assert lib.tracepool_malloc(lib.tracepool_default(), nbytes, 0, STREAM, ctypes.byref(ptr)) == OK  # [in graph]
    return ptr.value


def line_of(marker):
    with open(__file__) as source:
        return next(n for n, line in enumerate(source, 1) if line.rstrip().endswith("# " + marker))


def our_pools(report):
    return [p for p in report["pools"] if p["pool"] == POOL]


def mentions(entries, function):
    return any(f["function"] == function for e in entries for f in e["frames"])


def test_a_label_needs_a_retained_pool_and_is_checked_as_tags_are(pool_api):
    tp = pool_api.tracepool_default()
    assert pool_api.tracepool_pool_label(tp, 0, POOL, b"CUDA graph") == INVALID_ARGUMENT
    assert b"no private pool" in pool_api.tracepool_last_error()
    assert pool_api.tracepool_pool_retain(tp, 0, POOL) == OK
    try:
        for bad in [None, b"", b"\xff\xfe", b"x" * 300]:
            assert pool_api.tracepool_pool_label(tp, 0, POOL, bad) == INVALID_ARGUMENT, bad
        assert pool_api.tracepool_pool_label(tp, 0, 0, b"CUDA graph") == INVALID_ARGUMENT  # the default pool
        assert pool_api.tracepool_pool_label(tp, 0, POOL, "torch.cuda.MemPool ✓".encode()) == OK
        assert [p["label"] for p in our_pools(json.loads(tracepool.report("json")))] == ["torch.cuda.MemPool ✓"]
    finally:
        assert pool_api.tracepool_pool_release(tp, 0, POOL) == OK
    assert pool_api.tracepool_pool_label(tp, 0, POOL, b"CUDA graph") == INVALID_ARGUMENT  # retired


def test_a_retained_pool_is_its_own_group_named_by_the_line_that_created_it(pool_api):
    tp = pool_api.tracepool_default()
    open_graph_pool(pool_api)
    try:
        assert pool_api.tracepool_pool_label(tp, 0, POOL, b"CUDA graph") == OK
        blocks = [graph_alloc(pool_api, 3000) for _ in range(2)]
    finally:
        assert pool_api.tracepool_pool_end(tp, 0, POOL) == OK
    try:
        report = json.loads(tracepool.report("json"))
        [pool] = our_pools(report)
        assert (pool["label"], pool["bytes"], pool["blocks"]) == ("CUDA graph", 6000, 2)
        assert pool["reserved_bytes"] == pool["cached_bytes"] + pool["block_bytes"]
        creator = [f for f in pool["frames"] if f["kind"] == "python"][0]
        assert (creator["function"], creator["line"]) == ("open_graph_pool", line_of("[creates]"))
        assert mentions(pool["sites"], "graph_alloc")
        assert not mentions(report["leaks"], "graph_alloc"), "a graph's blocks are not leaks"
        text = tracepool.report("text", reason="exit")
        # Named by its title (Note [Site titles]): the line, then its callers'.
        assert "held by CUDA graph created at open_graph_pool (test_pools.py:%d) \u2190 " % line_of("[creates]") in text
        assert "5.86 KiB live in 2 blocks" in text
    finally:
        assert pool_api.tracepool_pool_release(tp, 0, POOL) == OK
    report = json.loads(tracepool.report("json"))
    assert our_pools(report) == []
    assert mentions(report["leaks"], "graph_alloc"), "released: its live blocks are leaks again"
    for ptr in blocks:
        tracepool.free(ptr)
