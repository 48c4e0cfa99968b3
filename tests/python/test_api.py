"""The tracepool package's API on the process-wide instance: one allocator shared with ctypes callers,
statistics in PyTorch's layouts, tags, marks and growing sites, cached versus leaked memory, reports,
configuration, and the exceptions every failure raises."""

import ctypes
import json
import threading

import pytest

import tracepool
from conftest import Report
from tracepool import _tracepool

KINDS = ["allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes", "active_bytes",
         "inactive_split_bytes", "requested_bytes"]
POOLS = ["all", "small_pool", "large_pool"]
FIELDS = ["current", "peak", "allocated", "freed"]
COUNTERS = ["num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free", "num_invalid_frees", "limit_bytes"]


# ---- One allocator per process ----


def test_the_package_and_ctypes_callers_share_one_library_and_one_allocator(c_api):
    with open("/proc/self/maps") as maps:
        mapped = {line.split()[-1] for line in maps if "libtracepool" in line}
    assert mapped == {tracepool.library_path()}
    before = tracepool.stats()["allocation.all.current"]
    ptr = ctypes.c_void_p()
    assert c_api.tracepool_malloc(c_api.tracepool_default(), 1000, 0, None, ctypes.byref(ptr)) == 0
    assert tracepool.stats()["allocation.all.current"] == before + 1
    tracepool.free(ptr.value)  # memory from ctypes goes back through the package
    assert tracepool.stats()["allocation.all.current"] == before


def test_the_default_instance_runs_the_configured_host_backend():
    assert _tracepool.backend_name() == "host"
    assert _tracepool.device_count() >= 1


def test_importing_the_package_neither_imports_torch_nor_creates_the_instance(run_python):
    child = run_python("""\
        import json, sys
        import tracepool
        assert "torch" not in sys.modules
        tracepool.configure("backend:host,python_depth:2")  # refused once the instance exists

        def innermost():
            return tracepool.alloc(4096)

        def middle():
            return innermost()

        def outermost():
            return middle()

        outermost()
        data = json.loads(tracepool.report())
        assert data["capture"]["python_depth"] == 2, data["capture"]
        [site] = data["leaks"]
        print(" ".join(f["function"] for f in site["frames"] if f["kind"] == "python"))
    """, conf="")
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["innermost", "middle"]  # python_depth 2: the two innermost frames


# ---- Statistics ----


def test_stats_have_every_key_of_torch_memory_stats_and_follow_allocations():
    before = tracepool.stats(0)
    assert set(before) == {f"{k}.{p}.{f}" for k in KINDS for p in POOLS for f in FIELDS} | set(COUNTERS)
    ptr = tracepool.alloc(3000)
    during = tracepool.stats()
    assert during["allocation.all.current"] == before["allocation.all.current"] + 1
    assert during["requested_bytes.all.current"] == before["requested_bytes.all.current"] + 3000
    assert during["allocation.small_pool.allocated"] == before["allocation.small_pool.allocated"] + 1
    tracepool.free(ptr)
    after = tracepool.stats()
    assert after["allocation.all.current"] == before["allocation.all.current"]
    assert after["allocation.all.freed"] == before["allocation.all.freed"] + 1


def test_nested_stats_hold_the_same_numbers_as_flat_stats():
    flat, nested = _tracepool.stats(0), _tracepool.nested_stats(0)
    assert {f"{k}.{p}.{f}": nested[k][p][f] for k in KINDS for p in POOLS for f in FIELDS} | {
        c: nested[c] for c in COUNTERS} == flat


def test_reset_peak_stats_brings_the_peak_down_to_current():
    tracepool.free(tracepool.alloc(1 << 20))
    assert tracepool.stats()["allocated_bytes.all.peak"] > tracepool.stats()["allocated_bytes.all.current"]
    _tracepool.reset_peak_stats(0)
    assert tracepool.stats()["allocated_bytes.all.peak"] == tracepool.stats()["allocated_bytes.all.current"]


# ---- Tags ----


def allocate_in(kept):
    kept.append(tracepool.alloc(5000))


@tracepool.tag("decorated")
def allocate_decorated(kept):
    kept.append(tracepool.alloc(5000))


def allocate_in_nested_tags(kept):
    with tracepool.tag("outer"):
        with tracepool.tag("inner"):
            allocate_in(kept)
        allocate_decorated(kept)
    allocate_in(kept)


def allocate_on_another_thread(kept):
    with tracepool.tag("main thread only"):
        worker = threading.Thread(target=allocate_in, args=(kept,))
        worker.start()
        worker.join()


def test_tags_from_context_managers_and_decorators_nest_per_thread(report):
    kept = []
    allocate_in_nested_tags(kept)
    allocate_on_another_thread(kept)
    nested = report().sites("leaks", "allocate_in_nested_tags")
    assert sorted(s["tags"] for s in nested) == [[], ["outer", "decorated"], ["outer", "inner"]]
    on_worker = [s for s in report().sites("leaks", "allocate_in") if "Thread.run" in [f[2] for f in Report.python_frames(s)]]
    assert [s["tags"] for s in on_worker] == [[]]  # tags belong to the thread that pushed them
    for ptr in kept:
        tracepool.free(ptr)


# ---- Marks, growing sites, cached memory ----


def grow_every_epoch(kept):
    kept.append(tracepool.alloc(65536))


def allocate_once(kept):
    kept.append(tracepool.alloc(32768))


def test_a_site_that_grows_at_every_mark_is_flagged_growing_and_a_steady_one_is_not(report):
    # CPython specialises the call to tracepool.alloc after a few runs, and the specialised call reaches the
    # extension through other native frames (no PyObject_Vectorcall), which makes another site. Warm the
    # line up first, so that every block counted below comes from one site.
    warm = []
    for _ in range(20):
        grow_every_epoch(warm)
    for ptr in warm:
        tracepool.free(ptr)
    kept = []
    allocate_once(kept)
    for epoch in range(4):
        grow_every_epoch(kept)
        tracepool.mark(f"epoch {epoch}")
    data = report()
    growing, steady = data.site("leaks", "grow_every_epoch"), data.site("leaks", "allocate_once")
    assert growing["live_at_marks"][-4:] == [65536, 131072, 196608, 262144]
    assert steady["live_at_marks"][-4:] == [32768] * 4
    assert growing["growing"] is True
    assert steady["growing"] is False
    assert [m["label"] for m in data.data["marks"]][-4:] == [f"epoch {e}" for e in range(4)]
    for ptr in kept:
        tracepool.free(ptr)


def allocate_and_free(nbytes):
    tracepool.free(tracepool.alloc(nbytes))


def test_freed_memory_shows_as_cached_by_its_site_not_as_leaked(report):
    allocate_and_free(98304)
    data = report()
    assert data.sites("leaks", "allocate_and_free") == []
    assert data.site("cached", "allocate_and_free")["bytes"] >= 98304


def release_a_large_block():
    allocate_and_free(24 << 20)


def test_empty_cache_gives_a_free_segment_back(report):
    release_a_large_block()
    reserved = tracepool.stats()["reserved_bytes.all.current"]
    assert report().sites("cached", "release_a_large_block") != []
    tracepool.empty_cache()
    assert tracepool.stats()["reserved_bytes.all.current"] <= reserved - (24 << 20)
    assert report().sites("cached", "release_a_large_block") == []


# ---- Reports ----


def leak_for_the_report():
    return tracepool.alloc(7777)


def test_leaks_and_written_reports_agree_with_the_report_string(tmp_path):
    leak_for_the_report()
    assert [s for s in tracepool.leaks() if any(f["function"] == "leak_for_the_report" for f in s["frames"])]
    tracepool.write_report(tmp_path / "report.json")
    tracepool.write_report(tmp_path / "report.txt")
    tracepool.write_report(tmp_path / "forced", format="json")
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["schema"] == "tracepool.report/1"
    assert any(f["function"] == "leak_for_the_report" for s in written["leaks"] for f in s["frames"])
    assert json.loads((tmp_path / "forced").read_text())["schema"] == "tracepool.report/1"
    assert "leak_for_the_report" in (tmp_path / "report.txt").read_text()
    assert "leak_for_the_report" in tracepool.report(format="text")


def test_the_snapshot_has_torchs_layout_and_names_the_python_frames():
    leak_for_the_report()
    snapshot = json.loads(_tracepool.torch_snapshot_json())
    assert {"segments", "device_traces"} <= set(snapshot)
    names = {frame["name"] for segment in snapshot["segments"] for block in segment["blocks"]
             for frame in block.get("frames", [])}
    assert "leak_for_the_report" in names


# ---- Errors ----


def test_the_exception_classes_are_also_the_builtin_kinds():
    assert issubclass(tracepool.Error, RuntimeError)
    assert issubclass(tracepool.OutOfMemoryError, tracepool.Error) and issubclass(tracepool.OutOfMemoryError,
                                                                                  MemoryError)
    assert issubclass(tracepool.InvalidArgumentError, tracepool.Error)
    assert issubclass(tracepool.InvalidArgumentError, ValueError)


def test_freeing_an_address_tracepool_never_gave_raises_a_value_error():
    before = tracepool.stats()["num_invalid_frees"]
    with pytest.raises(tracepool.InvalidArgumentError, match="never allocated") as caught:
        tracepool.free(0xDEAD000)
    assert isinstance(caught.value, ValueError)
    assert caught.value.status == -4  # TRACEPOOL_ERR_UNKNOWN_POINTER
    assert tracepool.stats()["num_invalid_frees"] == before + 1


def test_a_double_free_raises_a_value_error():
    ptr = tracepool.alloc(4096)
    tracepool.free(ptr)
    with pytest.raises(tracepool.InvalidArgumentError) as caught:
        tracepool.free(ptr)
    assert caught.value.status == -5  # TRACEPOOL_ERR_DOUBLE_FREE


def test_sizes_beyond_any_device_and_beyond_the_device_raise_the_right_errors():
    with pytest.raises(tracepool.InvalidArgumentError, match="largest supported request"):
        tracepool.alloc(1 << 60)
    ooms = tracepool.stats()["num_ooms"]
    with pytest.raises(tracepool.OutOfMemoryError) as caught:
        tracepool.alloc(1 << 40)  # a TiB: beyond the host backend's emulated 16 GiB
    assert isinstance(caught.value, MemoryError)
    assert caught.value.status == -2
    assert tracepool.stats()["num_ooms"] == ooms + 1
    with pytest.raises(TypeError):
        tracepool.alloc(-1)


def test_bad_devices_formats_and_tag_pops_raise_value_errors():
    with pytest.raises(tracepool.InvalidArgumentError, match="does not exist"):
        tracepool.alloc(16, device=99)
    with pytest.raises(tracepool.InvalidArgumentError):
        tracepool.stats(99)
    with pytest.raises(tracepool.InvalidArgumentError, match="xml"):
        tracepool.report(format="xml")
    with pytest.raises(tracepool.InvalidArgumentError):
        _tracepool.tag_pop()
    with pytest.raises(tracepool.InvalidArgumentError, match="NUL"):
        tracepool.mark("a\0b")


def test_configure_refuses_bad_text_and_a_change_once_the_instance_exists():
    tracepool.stats()  # the instance exists, configured with backend:host
    with pytest.raises(tracepool.InvalidArgumentError, match="bogus") as caught:
        tracepool.configure("backend:host,bogus:1")
    assert caught.value.status == -6  # TRACEPOOL_ERR_BAD_CONFIG
    with pytest.raises(tracepool.InvalidArgumentError, match="already exists"):
        tracepool.configure("backend:host,capture:native")
    tracepool.configure("backend:host")  # the configuration it has: nothing to refuse


def test_a_configuration_the_instance_cannot_start_with_raises_on_first_use(run_python):
    child = run_python("""\
        import tracepool
        try:
            tracepool.alloc(16)
        except tracepool.Error as e:
            print(type(e).__name__, e.status)
    """, conf="backend:host,host_devices:0")
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["Error", "-8"]  # TRACEPOOL_ERR_UNAVAILABLE: the instance could not be made


def test_reports_under_file_descriptor_exhaustion_raise_tracepool_errors(run_python):
    # Every descriptor taken, as a program that leaks files does: what the report needs to load or write
    # fails, and says so as a tracepool.Error, not as an OSError from deep in the import system.
    child = run_python("""\
        import errno, resource, tracepool
        kept = tracepool.alloc(1 << 20)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        files = []
        try:
            while True:
                files.append(open("/dev/null"))
        except OSError as e:
            assert e.errno == errno.EMFILE, e
        for name, call in (("write_report", lambda: tracepool.write_report("report.json")),
                           ("report", lambda: tracepool.report()),
                           ("write_report", lambda: tracepool.write_report("report.json"))):
            try:
                call()
                print(name, "done")
            except tracepool.Error as e:
                print(name, type(e).__name__, e)
    """)
    assert child.returncode == 0, child.stderr
    lines = child.stdout.splitlines()
    assert len(lines) == 3, child.stdout
    for line in lines:
        assert "Too many open files" in line and " done" not in line, line


def test_memory_got_outside_the_pool_is_reported_at_its_line_with_its_source():
    """tracepool.observe_alloc (Note [Observed memory]): a runtime's own allocation, recorded, never served."""
    ptr, size = 0x7F1200000000, 3 << 20

    def nccl_init():
        tracepool.observe_alloc(ptr, size, source="nccl")  # observed here

    nccl_init()
    try:
        report = json.loads(tracepool.report("json", holders=False))
        [site] = [s for s in report["leaks"] if s["tags"][-1:] == ["outside the pool: nccl"]]
        assert site["bytes"] == size
        python = [f for f in site["frames"] if f["kind"] == "python"]
        assert python[0]["function"].endswith("nccl_init") and site["title"].startswith(python[0]["function"])
        assert report["devices"][0]["observed_bytes"] == size
        with pytest.raises(tracepool.InvalidArgumentError, match="observed already"):
            tracepool.observe_alloc(ptr, size, source="nccl")
        with pytest.raises(tracepool.InvalidArgumentError, match="kind must be"):
            tracepool.observe_alloc(ptr + size, size, kind="gpu", source="nccl")
    finally:
        tracepool.observe_free(ptr)
    report = json.loads(tracepool.report("json", holders=False))
    assert report["devices"][0]["observed_bytes"] == 0
    with pytest.raises(tracepool.InvalidArgumentError, match="never observed"):
        tracepool.observe_free(ptr)
