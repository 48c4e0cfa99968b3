"""tracepool.cupy and tracepool.numba without a GPU: CuPy's allocator hooks and Numba's memory manager,
called as CuPy and Numba call them, on the host backend; and what each says where its runtime is missing.

CuPy and Numba import without a driver. CuPy's C hooks are driven through its own
CFunctionAllocatorMemory (what cupy.ndarray's allocation makes); Numba's manager through memalloc and
the finalizer Numba attaches. What needs a device (kernels, streams, results equal to the runtimes' own
pools) is in the GPU check. tests/python/run.sh installs both; where they cannot be imported the tests
fail, unless TRACEPOOL_TEST_HOSTS=optional says they may be skipped.
"""

import gc
import importlib
import os
import subprocess
import sys

import pytest

import tracepool
from tracepool import _tracepool


def _host(name):
    if os.environ.get("TRACEPOOL_TEST_HOSTS") == "optional":
        return pytest.importorskip(name)
    return importlib.import_module(name)


def live_blocks():
    return tracepool.stats()["allocation.all.current"]


def tagged_site(report, tag, function):
    """The one leaked site with `tag` whose Python frames ran `function`."""
    sites = [s for s in report().sites("leaks", function) if tag in s["tags"]]
    assert len(sites) == 1, sites
    return sites[0]


# ---- CuPy ------------------------------------------------------------------------------------------


@pytest.fixture
def cupy_hooks():
    """tracepool.cupy installed; (CFunctionAllocatorMemory maker, the module), uninstalled after."""
    cupy = _host("cupy")
    import tracepool.cupy

    tracepool.cupy.install()
    # CuPy's current-stream function needs a driver (it counts devices on first use): here, stream 0.
    # The hooks are the ones install() gave CuPy.
    malloc, free = tracepool.cupy._install_hooks(None)
    assert (malloc, free) == tracepool.cupy._state["hooks"]

    def make(size):
        # What CFunctionAllocator.malloc makes for each allocation: the hooks called from Cython.
        return cupy.cuda.memory.CFunctionAllocatorMemory(size, 0, malloc, free, 0)

    yield make, tracepool.cupy
    tracepool.cupy.uninstall()


def make_cupy_array_memory(make):
    return make(3 << 20)  # the line the report must name


def test_cupy_allocations_are_tracepool_blocks_tagged_cupy_at_the_callers_line(cupy_hooks, report):
    make, _ = cupy_hooks
    before = live_blocks()
    memory = make_cupy_array_memory(make)
    assert memory.ptr != 0 and memory.size == 3 << 20
    assert live_blocks() == before + 1
    site = tagged_site(report, "cupy", "make_cupy_array_memory")
    assert site["bytes"] == 3 << 20
    del memory
    gc.collect()
    assert live_blocks() == before  # CuPy's dealloc ran the free hook


def test_cupy_an_error_of_cupys_stream_function_is_raised_and_nothing_is_allocated(cupy_hooks):
    # Without a driver CuPy's get_current_stream_ptr fails: the hook must pass CuPy's own error on.
    cupy = _host("cupy")
    if cupy.is_available():
        pytest.skip("a GPU is here: CuPy's stream function works (the GPU check covers it)")
    make, module = cupy_hooks
    tracepool.cupy._install_hooks(module._stream_capsule())
    before = live_blocks()
    with pytest.raises(cupy.cuda.runtime.CUDARuntimeError):
        make(4096)
    assert live_blocks() == before


def test_cupy_install_makes_tracepool_cupys_allocator_and_uninstall_restores_it(cupy_hooks):
    cupy = _host("cupy")
    _, module = cupy_hooks
    assert module.installed()
    assert cupy.cuda.get_allocator() == module._state["allocator"].malloc
    previous = module._state["previous"]
    module.install()  # a second call changes nothing
    assert module._state["previous"] is previous
    module.uninstall()
    assert not module.installed() and cupy.cuda.get_allocator() is previous
    module.install()  # for the fixture's own uninstall


def test_cupy_out_of_memory_is_cupys_and_tracepools_class_with_tracepools_words(cupy_hooks):
    cupy = _host("cupy")
    make, module = cupy_hooks
    before = live_blocks()
    with pytest.raises(cupy.cuda.memory.OutOfMemoryError) as caught:
        make(1 << 45)  # 32 TiB: more than the host backend's device
    error = caught.value
    assert isinstance(error, tracepool.OutOfMemoryError) and isinstance(error, module.OutOfMemoryError)
    assert error.status == next(code for code, text, _ in _tracepool._statuses if text.startswith("TRACEPOOL_ERR_OOM"))
    assert "out of memory on device 0" in str(error)
    assert live_blocks() == before


def test_cupy_a_request_beyond_any_device_is_tracepools_invalid_argument(cupy_hooks):
    make, _ = cupy_hooks
    with pytest.raises(tracepool.InvalidArgumentError, match="beyond the largest supported request"):
        make(1 << 62)


def test_cupy_free_of_a_pointer_tracepool_never_gave_is_told_not_fatal(run_python):
    _host("cupy")
    done = run_python(
        """
        import ctypes, tracepool, tracepool.cupy
        from tracepool import _tracepool
        tracepool.cupy.install()
        malloc, free = tracepool.cupy._install_hooks(None)
        ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)(free)(None, 4096, 0)
        print("alive", tracepool.stats()["num_invalid_frees"])
        """
    )
    assert done.returncode == 0, done.stderr
    assert "alive 1" in done.stdout
    assert "tracepool.cupy: free of 0x1000 refused" in done.stderr


def install_refusal(run_python, module, env):
    """What `module`.install() says when it refuses, in a fresh process under `env`."""
    done = run_python(
        """
        import %s
        try:
            %s.install()
        except RuntimeError as e:
            print("refused:", e)
        """ % (module, module),
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_cupy_per_thread_default_stream_is_refused_with_the_reason(run_python):
    _host("cupy")
    said = install_refusal(run_python, "tracepool.cupy", {"CUPY_CUDA_PER_THREAD_DEFAULT_STREAM": "1"})
    assert "refused: tracepool.cupy: CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1 is not supported" in said


def test_cupy_stream_function_with_another_signature_is_refused():
    _host("cupy")
    import tracepool.cupy

    capsule = tracepool.cupy._stream_capsule()
    assert capsule is not None, "this CuPy has no get_current_stream_ptr capsule"
    wrong = _capsule_named(capsule, b"int (void)")
    with pytest.raises(TypeError, match="has signature 'int \\(void\\)'"):
        tracepool.cupy._install_hooks(wrong)


def _capsule_named(capsule, name):
    import ctypes

    api = ctypes.pythonapi
    api.PyCapsule_GetName.restype = ctypes.c_char_p
    api.PyCapsule_GetName.argtypes = [ctypes.py_object]
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_New.restype = ctypes.py_object
    api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    pointer = api.PyCapsule_GetPointer(capsule, api.PyCapsule_GetName(capsule))
    _capsule_named.keep = ctypes.create_string_buffer(name)  # the capsule keeps a pointer to its name
    return api.PyCapsule_New(pointer, _capsule_named.keep, None)


def test_cupy_missing_is_said_clearly(monkeypatch):
    import importlib.util

    import tracepool.cupy

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cupy" else real(name, *a))
    with pytest.raises(RuntimeError, match="CuPy is not installed"):
        tracepool.cupy.install()


# ---- Numba -----------------------------------------------------------------------------------------


@pytest.fixture
def numba_manager():
    _host("numba.cuda")
    import tracepool.numba

    return tracepool.numba.TracepoolMemoryManager(context=None)


def numba_device_array_memory(manager):
    return manager.memalloc(5 << 20)  # the line the report must name


def test_numba_memalloc_is_a_tracepool_block_tagged_numba_freed_by_its_finalizer(numba_manager, report):
    before = live_blocks()
    pointer = numba_device_array_memory(numba_manager)
    assert pointer.size == 5 << 20 and int(pointer.device_ctypes_pointer.value) != 0
    assert live_blocks() == before + 1
    assert tagged_site(report, "numba", "numba_device_array_memory")["bytes"] == 5 << 20
    address = int(pointer.device_ctypes_pointer.value)
    pointer.free()  # what Numba's finalizer does when the array dies
    assert live_blocks() == before
    again = _tracepool.alloc(5 << 20)
    try:
        assert again == address  # the fenced block is reused once its event completed
    finally:
        _tracepool.free(again)


def test_numba_manager_interface(numba_manager, monkeypatch):
    import numba.cuda

    import tracepool.numba

    assert numba_manager.interface_version == 1
    info = numba_manager.get_memory_info()
    assert info.total > 0 and 0 <= info.free <= info.total
    calls = []
    real_stats = tracepool.numba._tracepool.stats
    monkeypatch.setattr(tracepool.numba._tracepool, "stats", lambda *a: calls.append(a) or real_stats(*a))
    numba_manager.initialize()
    # Numba calls it on every context push and kernel launch: repeatable, and the work is done once.
    numba_manager.initialize()
    assert len(calls) == 1
    assert numba_manager.deallocations.memory_capacity == info.total  # host frees queued by bytes, as Numba's
    with numba_manager.defer_cleanup():
        pass
    numba_manager.reset()
    numba.cuda.set_memory_manager(type(numba_manager))  # Numba checks interface_version on a fresh one


def test_numba_out_of_memory_is_tracepools_with_its_words(numba_manager):
    with pytest.raises(tracepool.OutOfMemoryError, match="out of memory on device 0"):
        numba_manager.memalloc(1 << 45)


def test_numba_env_selects_the_module_and_the_simulator_is_told(run_python):
    _host("numba.cuda")
    done = run_python(
        """
        import importlib
        m = importlib.import_module("tracepool.numba")
        print("manager:", m._numba_memory_manager.__name__)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "manager: TracepoolMemoryManager" in done.stdout
    said = install_refusal(run_python, "tracepool.numba", {"NUMBA_ENABLE_CUDASIM": "1"})
    assert "refused: tracepool.numba: Numba's CUDA memory-manager classes are not available here" in said


def test_hosts_import_without_their_runtimes():
    # tracepool.cupy never imports CuPy until install(); tracepool.numba imports Numba (its manager
    # class must exist for NUMBA_CUDA_MEMORY_MANAGER) but loads without a GPU.
    code = (
        "import sys, tracepool.cupy, tracepool.numba\n"
        "print('cupy' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TRACEPOOL_CONF="backend:host"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


# ---- python -m tracepool run: every runtime it finds -------------------------------------------------

PROBE = """
import os, sys
print("cupy imported before the program:", "cupy" in sys.modules, "numba:", "numba" in sys.modules)
import cupy
import tracepool.cupy
print("cupy installed:", tracepool.cupy.installed())
import numba.cuda
from numba.cuda.cudadrv import driver
print("numba manager:", getattr(driver._memory_manager, "__name__", None))
print("variable:", os.environ.get("NUMBA_CUDA_MEMORY_MANAGER"))
"""


@pytest.mark.parametrize("flags", [[], ["--no-cupy", "--no-numba"]])
def test_run_installs_into_cupy_and_numba_when_the_program_imports_them(tmp_path, flags):
    _host("cupy")
    _host("numba.cuda")
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = dict(os.environ, TRACEPOOL_CONF="backend:host")
    env.pop("NUMBA_CUDA_MEMORY_MANAGER", None)
    done = subprocess.run([sys.executable, "-m", "tracepool", "run", "--no-torch", *flags, str(script)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert "cupy imported before the program: False numba: False" in done.stdout  # never imported for nothing
    assert ("cupy installed: %s" % (not flags)) in done.stdout
    assert ("numba manager: %s" % (None if flags else "TracepoolMemoryManager")) in done.stdout
    assert "variable: None" in done.stdout  # nothing a child process would inherit


# ---- Review findings: each failed before its fix ------------------------------------------------------


def test_cupy_daemon_threads_allocating_while_python_exits_do_not_abort(run_python):
    _host("cupy")
    done = run_python(
        """
        import threading, cupy, tracepool.cupy
        from tracepool import _tracepool
        tracepool.cupy.install()
        malloc, free = tracepool.cupy._install_hooks(None)
        started = threading.Barrier(5)
        def churn():
            started.wait()
            while True:
                cupy.cuda.memory.CFunctionAllocatorMemory(4096, 0, malloc, free, 0)
        for _ in range(4):
            threading.Thread(target=churn, daemon=True).start()
        started.wait()
        print("exiting")
        """
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "exiting" in done.stdout


def test_cupy_stream_handle_2_is_refused_with_the_reason(cupy_hooks):
    import ctypes

    make, module = cupy_hooks
    returns_2 = ctypes.CFUNCTYPE(ctypes.c_ssize_t)(lambda: 2)
    capsule = _capsule_at(ctypes.cast(returns_2, ctypes.c_void_p).value, b"intptr_t (void)")
    tracepool.cupy._install_hooks(capsule)
    before = live_blocks()
    try:
        with pytest.raises(RuntimeError, match="per-thread default stream"):
            make(4096)
    finally:
        tracepool.cupy._install_hooks(None)
    assert live_blocks() == before


def _capsule_at(pointer, name):
    import ctypes

    api = ctypes.pythonapi
    api.PyCapsule_New.restype = ctypes.py_object
    api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    keep = ctypes.create_string_buffer(name)  # a capsule keeps a pointer to its name
    _capsule_at.kept = getattr(_capsule_at, "kept", []) + [keep]
    return api.PyCapsule_New(pointer, keep, None)


def test_cupy_without_a_stream_function_install_refuses(monkeypatch):
    _host("cupy")
    import tracepool.cupy

    monkeypatch.setattr(tracepool.cupy, "_stream_capsule", lambda: None)
    with pytest.raises(RuntimeError, match="offers no get_current_stream_ptr"):
        tracepool.cupy.install()
    assert not tracepool.cupy.installed()


def test_cupy_out_of_memory_pickles_and_is_one_class_across_installs(cupy_hooks):
    import pickle

    make, module = cupy_hooks
    with pytest.raises(module.OutOfMemoryError) as caught:
        make(1 << 45)
    back = pickle.loads(pickle.dumps(caught.value))
    assert type(back) is module.OutOfMemoryError and str(back) == str(caught.value)
    assert back.status == caught.value.status
    first = module.OutOfMemoryError
    module.uninstall()
    module.install()
    assert module.OutOfMemoryError is first
    from tracepool.cupy import OutOfMemoryError

    assert OutOfMemoryError is first


def test_after_import_survives_a_find_spec_first_and_keeps_the_real_loader(run_python):
    _host("cupy")
    done = run_python(
        """
        import importlib.resources, importlib.util, pkgutil
        from tracepool._after_import import after_import
        ran = []
        after_import("cupy", lambda m: ran.append(m.__name__))
        assert importlib.util.find_spec("cupy") is not None  # looks, loads nothing
        assert ran == []
        import cupy
        print("ran:", ran)
        print("resources:", (importlib.resources.files(cupy) / "__init__.py").is_file())
        print("get_data:", len(pkgutil.get_data("cupy", "__init__.py") or b"") > 0)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "ran: ['cupy']" in done.stdout
    assert "resources: True" in done.stdout and "get_data: True" in done.stdout


def test_run_reports_a_failed_cupy_install_and_the_import_still_works(monkeypatch, capsys):
    _host("cupy")
    import tracepool.cupy
    from tracepool import _run

    def broken():
        raise TypeError("a CuPy this tracepool does not know")

    monkeypatch.setattr(tracepool.cupy, "install", broken)
    _run._install_cupy(None)  # what the import hook calls: must not raise into `import cupy`
    assert "tracepool: CuPy left with its own allocator (TypeError: a CuPy this tracepool does not know)" in (
        capsys.readouterr().err)


def test_numba_memalloc_of_nothing_frees_nothing(run_python):
    _host("numba.cuda")
    done = run_python(
        """
        import gc, tracepool.numba
        m = tracepool.numba.TracepoolMemoryManager(context=None)
        p = m.memalloc(0)
        del p
        gc.collect()
        print("done")
        """
    )
    assert done.returncode == 0, done.stderr
    assert "done" in done.stdout and "Exception ignored" not in done.stderr, done.stderr
