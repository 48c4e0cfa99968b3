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


# A build's output as `pip install -v` of tracepool prints it (scikit-build-core, CMake, Ninja, each line
# indented by pip): 80 steps.
FAKE_BUILD = r"""
echo "Processing /work/tracepool"
echo "  Running command Building wheel for tracepool (pyproject.toml)"
echo "  *** scikit-build-core 1.1.2 using CMake 3.25.1 (wheel)"
echo "  *** Configuring CMake..."
echo "  -- The CXX compiler identification is GNU 12.2.0"
echo "  *** Building project with Ninja..."
for i in $(seq 1 80); do echo "  [$i/80] Building CXX object core/CMakeFiles/f$i.cpp.o"; done
echo "  *** Installing project into wheel..."
echo "  -- Installing: /tmp/wheel/platlib/tracepool/libtracepool.so"
echo "  -- Installing: /tmp/wheel/platlib/tracepool/_tracepool.so"
echo "Successfully installed tracepool-0.1.0"
"""


def show_progress(tmp_path, build):
    return subprocess.run(["bash", str(ROOT / "examples" / "show_progress.sh"), str(tmp_path / "logs" / "build.log"),
                           "bash", "-c", build], capture_output=True, text=True, timeout=60)


def test_a_build_shows_its_stages_and_a_few_steps_and_logs_the_rest(tmp_path):
    done = show_progress(tmp_path, FAKE_BUILD)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == ["  configuring (CMake)"] + [
        "  compiling: %d of 80 steps" % n for n in (1, 20, 40, 60, 80)] + ["  installing"], done.stderr
    log = (tmp_path / "logs" / "build.log").read_text()
    assert "[37/80] Building CXX object" in log and "Successfully installed" in log


def test_a_build_that_fails_shows_the_end_of_its_log_and_keeps_its_status(tmp_path):
    done = show_progress(tmp_path, "echo '[1/2] Building CXX object a.o'; echo 'a.cpp:3: error: expected ;'; exit 3")
    assert done.returncode == 3
    assert "the build failed (status 3)" in done.stderr and "a.cpp:3: error: expected ;" in done.stderr, done.stderr


def test_the_demo_shows_its_builds_progress_instead_of_silence(tmp_path):
    """README command 1 (examples/run_demo.sh), in a copy of the tree whose .venv's Python only pretends: the
    install says what it does and how far it got, in a few lines, and the program's report follows."""
    (tmp_path / "examples").mkdir()
    (tmp_path / ".ci").mkdir()
    for name in ("run_demo.sh", "show_progress.sh"):
        (tmp_path / "examples" / name).write_text((ROOT / "examples" / name).read_text())
    (tmp_path / ".ci" / "deps").write_text("")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/bash\ncase "$*" in\n  *"pip install -v"*) %s;;\n  *"pip install"*) ;;\n'
                      '  *"-m tracepool run"*) echo "== tracepool report: $*";;\n  *) exit 9;;\nesac\n' % FAKE_BUILD)
    python.chmod(0o755)
    done = subprocess.run(["bash", str(tmp_path / "examples" / "run_demo.sh")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("tracepool: installing into .venv"), lines
    assert "  compiling: 80 of 80 steps" in lines and len(lines) < 12, lines
    assert "Building CXX object" not in done.stderr + done.stdout
    assert done.stdout.strip().endswith("run examples/leaky_training.py"), done.stdout
    assert "[80/80] Building CXX object" in (tmp_path / "build" / "demo-install.log").read_text()
