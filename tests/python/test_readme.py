"""The README's quick starts, run as a reader would paste them (host backend, no GPU)."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import working_tool

ROOT = Path(__file__).resolve().parents[2]


def readme_block(heading, language):
    """The first ```language block after the README heading `heading`."""
    text = (ROOT / "README.md").read_text()
    start = text.index(heading)
    match = re.compile(r"```%s\n(.*?)```" % language, re.S).search(text, start)
    assert match, "no %s block after %r" % (language, heading)
    return match.group(1)


def test_the_c_cpp_and_ctypes_quick_start_runs_as_written(tmp_path):
    if not (ROOT / "build" / "CMakeCache.txt").exists():
        pytest.skip("the quick start installs build/, which tests/run_tests.sh makes first")
    if working_tool("cmake") is None or working_tool("cc") is None:
        pytest.skip("the quick start builds C and C++: no working CMake or C compiler here")
    block = readme_block("### Quick start: C, C++ and ctypes", "sh")
    env = dict(os.environ, HOME=str(tmp_path), TRACEPOOL_CONF="backend:host")
    env.pop("PKG_CONFIG_PATH", None)
    # Out-of-tree build folders go to a scratch copy of the paths the block names, not the checkout.
    block = block.replace("build-c", str(tmp_path / "build-c")).replace("build-cpp", str(tmp_path / "build-cpp"))
    block = block.replace("-o runtime && ./runtime", "-o %s/runtime && %s/runtime" % (tmp_path, tmp_path))
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert out.count("runtime.c on the host backend") == 2, out  # find_package, then pkg-config
    assert "host.cpp on the host backend" in out and "ctypes host on the host backend" in out
    assert out.count("GROWING across marks") >= 4, out
