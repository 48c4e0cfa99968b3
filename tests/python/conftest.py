"""Shared setup of the Python package's tests.

CI has no GPU: the process-wide instance uses the host backend, configured here before anything
imports tracepool (the default instance reads TRACEPOOL_CONF once, at its first use). Tests that need
another configuration, or a process of their own (exit paths, deadlock bounds), run a child Python.
"""

import os

os.environ["TRACEPOOL_CONF"] = "backend:host"
os.environ.pop("TRACEPOOL_REPORT", None)

import ctypes  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402

import pytest  # noqa: E402

import tracepool  # noqa: E402


class Report:
    """A JSON report (docs/report-schema.md), with its sites looked up by the Python code that made them."""

    def __init__(self, data):
        self.data = data

    @staticmethod
    def python_frames(site):
        """(file, line, function, borrowed) of the site's Python frames, innermost first."""
        return [(f["file"], f["line"], f["function"], f["borrowed"]) for f in site["frames"] if f["kind"] == "python"]

    def sites(self, section, function):
        """The sites of `section` ("leaks", "cached", "retained") that ran `function` (a qualified name)."""
        return [s for s in self.data[section] if any(f[2] == function for f in self.python_frames(s))]

    def site(self, section, function):
        """The one site of `section` that ran `function`."""
        found = self.sites(section, function)
        assert len(found) == 1, (section, function, found)
        return found[0]


@pytest.fixture
def report():
    """Reads the default instance's report now (no argument) or parses a report's JSON text."""

    def read(text=None):
        return Report(json.loads(tracepool.report("json") if text is None else text))

    return read


@pytest.fixture(scope="session")
def c_api():
    """libtracepool.so through ctypes, as a framework loads it: the library the package itself uses."""
    lib = ctypes.CDLL(tracepool.library_path())
    lib.tracepool_default.restype = ctypes.c_void_p
    lib.tracepool_default.argtypes = []
    lib.tracepool_malloc.restype = ctypes.c_int
    lib.tracepool_malloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                                     ctypes.POINTER(ctypes.c_void_p)]
    lib.tracepool_free.restype = ctypes.c_int
    lib.tracepool_free.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    return lib


def working_tool(*names):
    """The path of the first of `names` on PATH that runs (`--version` succeeds), or None: the wheel's
    test (tests/wheel/run.sh) replaces every compiler with /bin/false, which is found but cannot run."""
    import shutil

    for name in names:
        path = shutil.which(name)
        if path and subprocess.run([path, "--version"], capture_output=True).returncode == 0:
            return path
    return None


@pytest.fixture
def run_python(tmp_path):
    """Runs `code` in a child Python on the host backend; returns the finished process (text output).

    `timeout` bounds the child: a hang fails the test instead of stalling the suite.
    """

    def run(code, timeout=120, conf="backend:host", env=None):
        script = tmp_path / "child.py"
        script.write_text(textwrap.dedent(code))
        child_env = dict(os.environ, TRACEPOOL_CONF=conf, **(env or {}))
        return subprocess.run([sys.executable, str(script)], env=child_env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=timeout)

    return run
