"""`python -m tracepool run --intercept` (tracepool/_intercept.py): the interposer (Note [Interposer]) in a
Python program and in any executable, on the stand-in driver (tests/support/stand_in_cuda.c, built here with
the C compiler): what the program took from the driver is in its report at its lines."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import working_tool

ROOT = pathlib.Path(__file__).resolve().parents[1]
MiB = 1 << 20


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """The stand-in driver as libcuda.so.1 in a folder of its own, and the test client built against nothing."""
    compiler = working_tool("cc", "gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in driver")
    folder = tmp_path_factory.mktemp("stand-in")
    support = ROOT / "support"
    build = lambda *args: subprocess.run([compiler, "-g", "-O1", *map(str, args)], check=True)  # noqa: E731
    build("-shared", "-fPIC", "-fvisibility=hidden", "-Wl,-soname,libcuda.so.1", "-Wl,-Bsymbolic-functions", "-o", folder / "libcuda.so.1",
          support / "stand_in_cuda.c", "-lpthread")
    build("-shared", "-fPIC", "-o", folder / "libnext_probe.so", support / "next_probe.c", "-ldl")
    build("-shared", "-fPIC", "-o", folder / "liblibrary_thread.so", support / "library_thread.c", "-ldl", "-lpthread")
    build("-o", folder / "client", support / "intercept_client.c", "-L", folder, "-lnext_probe", "-Wl,-rpath," + str(folder),
          "-ldl", "-lpthread")
    return folder


def run(args, folder, tmp_path, **kw):
    env = dict(os.environ, LD_LIBRARY_PATH=str(folder), TRACEPOOL_CONF="backend:host")
    env.pop("TRACEPOOL_REPORT", None)
    return subprocess.run([sys.executable, "-m", "tracepool", "run", *args], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, **kw)


def site(report, function, tag):
    """The live site whose stack holds `function` and whose innermost tag is `tag`."""
    for entry in report["leaks"]:
        if entry["tags"][-1:] == [tag] and any(function in f["function"] for f in entry["frames"]):
            return entry
    raise AssertionError("no site at %s tagged %r in %s" % (function, tag, json.dumps(report["leaks"], indent=1)))


def test_a_program_under_intercept_has_its_driver_allocations_at_its_lines(stand_in, tmp_path):
    child = run(["--intercept", "-o", "report.json", "--", str(stand_in / "client"), "runtime"], stand_in, tmp_path)
    assert child.returncode == 0, child.stderr
    assert "runtime: kept 3 MiB" in child.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert site(report, "leak_through_runtime", "outside the pool: cuMemAlloc")["bytes"] == 3 * MiB
    assert site(report, "leak_through_runtime", "pinned host: cuMemHostAlloc")["bytes"] == 2 * MiB
    assert site(report, "leak_through_dlsym", "outside the pool: cuMemAlloc")["bytes"] == 6 * MiB
    assert report["devices"][0]["observed_bytes"] == 15 * MiB
    assert "kept in" not in child.stderr  # one process: its report shown, nothing left behind


def test_the_report_goes_to_stderr_as_text_by_default_and_the_status_is_the_programs(stand_in, tmp_path):
    child = run(["--intercept", "--top", "2", "--", str(stand_in / "client"), "threads"], stand_in, tmp_path)
    assert child.returncode == 0, child.stderr
    assert "8.00 MiB in 8 blocks [outside the pool: cuMemAlloc]" in child.stderr, child.stderr
    assert "at churn (" in child.stderr
    failed = run(["--intercept", "--", "sh", "-c", "exit 3"], stand_in, tmp_path)
    assert failed.returncode == 3
    assert "sh made no allocation through the CUDA driver that tracepool saw, and wrote no report" in failed.stderr


def test_a_python_program_under_intercept_has_them_at_its_python_lines(stand_in, tmp_path):
    (tmp_path / "train.py").write_text(
        "import ctypes\n"
        "cuda = ctypes.CDLL('libcuda.so.1')\n"
        "assert cuda.cuInit(0) == 0\n"
        "def load_weights(size):\n"
        "    p = ctypes.c_uint64()\n"
        "    assert cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size)) == 0\n"
        "    return p\n"
        "def scratch(size):\n"
        "    p = load_weights(size)\n"
        "    assert cuda.cuMemFree_v2(p) == 0\n"
        "kept = load_weights(7 << 20)\n"
        "scratch(9 << 20)\n")
    child = run(["--intercept", "--no-holders", "-o", "report.json", "train.py"], stand_in, tmp_path)
    assert child.returncode == 0, child.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    found = site(report, "load_weights", "outside the pool: cuMemAlloc")
    assert found["bytes"] == 7 * MiB
    python = [f for f in found["frames"] if f["kind"] == "python"]
    assert [f["line"] for f in python[:2]] == [6, 11], python
    assert report["devices"][0]["observed_bytes"] == 7 * MiB  # the 9 MiB freed is gone


# The first 6 lines of a program that uses tests/support/library_thread.c over the stand-in driver: it has recorded
# once (1 MiB), so that the threads it starts from then on adopt their starter's line.
WITH_LIBRARY = ("import ctypes\n"
                "cuda = ctypes.CDLL('libcuda.so.1')\n"
                "library = ctypes.CDLL('liblibrary_thread.so')\n"
                "assert cuda.cuInit(0) == 0\n"
                "first = ctypes.c_uint64()\n"
                "assert cuda.cuMemAlloc_v2(ctypes.byref(first), ctypes.c_size_t(1 << 20)) == 0\n")


def python_frames(found):
    """(function, line, borrowed) of a site's Python frames, innermost first."""
    return [(f["function"], f["line"], f["borrowed"]) for f in found["frames"] if f["kind"] == "python"]


def test_a_librarys_own_thread_is_charged_to_the_python_line_that_started_it(stand_in, tmp_path):
    """Note [Thread origins]: the thread has no Python frames; its allocation ends with the frames of the line
    that started it (as NCCL's proxy thread's buffers end at the line that made the process group)."""
    (tmp_path / "group.py").write_text(
        WITH_LIBRARY +
        "def make_process_group():\n"
        "    assert library.allocate_on_its_own_thread(ctypes.c_size_t(5 << 20)) == 0\n"
        "make_process_group()\n")
    child = run(["--intercept", "--no-holders", "-o", "report.json", "group.py"], stand_in, tmp_path)
    assert child.returncode == 0, child.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    found = site(report, "allocate", "outside the pool: cuMemAlloc")
    assert found["bytes"] == 5 * MiB
    python = python_frames(found)
    assert python[:2] == [("make_process_group", 8, True), ("<module>", 9, True)], found["frames"]
    assert all(borrowed for _, _, borrowed in python), python
    assert found["frames"][0]["kind"] == "native", "the thread's own frames come first"


def test_a_librarys_worker_is_charged_to_the_line_whose_call_it_serves(stand_in, tmp_path):
    """Note [Thread origins]: a worker started early (as XLA's compile threads are, at JAX's first operation) and
    handed work later (the first call of a jitted function, which loads code on the calling thread and then
    waits while the worker autotunes) has its allocation at the line where the caller last reached the driver."""
    (tmp_path / "jit.py").write_text(
        WITH_LIBRARY +
        "assert library.start_worker() == 0\n"
        "def step():\n"
        "    code = ctypes.c_uint64()\n"
        "    assert cuda.cuMemAlloc_v2(ctypes.byref(code), ctypes.c_size_t(2 << 20)) == 0\n"
        "    assert library.run_on_worker(ctypes.c_size_t(6 << 20)) == 0\n"
        "step()\n"
        "assert library.run_on_worker(ctypes.c_size_t(7 << 20)) == 0\n")
    child = run(["--intercept", "--no-holders", "-o", "report.json", "jit.py"], stand_in, tmp_path)
    assert child.returncode == 0, child.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    # Both requests at step's trip to the driver: the caller made none since, so the second is there too.
    found = site(report, "allocate_now", "outside the pool: cuMemAlloc")
    assert (found["bytes"], found["blocks"]) == (13 * MiB, 2), report["leaks"]
    python = python_frames(found)
    assert python[:2] == [("step", 10, True), ("<module>", 12, True)], found["frames"]
    assert all(borrowed for _, _, borrowed in python), python


def test_each_process_of_the_program_writes_its_report_and_run_says_where_they_are(stand_in, tmp_path):
    client = str(stand_in / "client")
    child = run(["--intercept", "--", "sh", "-c", "%s threads && %s runtime" % (client, client)], stand_in, tmp_path)
    assert child.returncode == 0, child.stderr
    assert "2 other processes of the program wrote reports too, kept in " in child.stderr, child.stderr
    folder = pathlib.Path(child.stderr.split("kept in ")[1].split(" ")[0])
    reports = [json.loads(p.read_text()) for p in sorted(folder.glob("report-*.json"))]
    assert sorted(r["devices"][0]["observed_bytes"] for r in reports) == [8 * MiB, 15 * MiB]


def test_intercept_mistakes_are_one_line(tmp_path):
    env = dict(os.environ)
    for args, says in ((["--intercept", "-m", "json.tool", "--", "true"], "not both"),
                       (["--intercept", "--"], "name the program to run"),
                       (["--intercept", "--", str(tmp_path / "missing")], "cannot start")):
        child = subprocess.run([sys.executable, "-m", "tracepool", "run", *args], env=env, capture_output=True,
                               text=True, timeout=60)
        assert child.returncode == 2 and says in child.stderr and child.stderr.count("\n") == 1, (args, child.stderr)


def test_a_program_without_a_driver_runs_under_intercept_as_without_it(tmp_path):
    """No libcuda at all (this machine, the wheel's test): the interposer loads, passes everything on, and the
    report is the usual one."""
    (tmp_path / "plain.py").write_text("import tracepool\nkept = tracepool.alloc(1 << 20)\nprint('ran')\n")
    env = dict(os.environ, TRACEPOOL_CONF="backend:host")
    child = subprocess.run([sys.executable, "-m", "tracepool", "run", "--intercept", "-o", "report.json", "plain.py"],
                           env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert child.returncode == 0 and "ran" in child.stdout, child.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["devices"][0]["observed_bytes"] == 0
    assert sum(e["bytes"] for e in report["leaks"]) == 1 << 20
