"""tests/gpu/torch_own_tests.py, the runner of PyTorch's own tests, without a GPU: a folder of fakes
stands in for what get_torch_tests.sh fetches (expecttest, psutil), for torch (a CUDA device seen) and
for tracepool (fakepool.install marks the process, and one test fails where it is marked)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parents[1] / "gpu" / "torch_own_tests.py"

FAKE_TESTS = '''
import os
import time

import pytest

import fake_state


class TestFake:
    def test_poisons_its_process(self):
        fake_state.poisoned = True  # a leaked graph, say: only this process sees it
        assert False, "poisoned on purpose"

    def test_sees_a_clean_process(self):
        assert not fake_state.poisoned

    def test_breaks_under_the_pool(self):
        assert not os.environ.get("FAKEPOOL_INSTALLED"), "broken under the pool"

    def test_skips(self):
        pytest.skip("no second device")

    def test_hangs(self):
        time.sleep(60)

    def test_oom_needs_the_device_alone(self):
        pass
'''

SELECTION = """\
# the fakes' selection
core test_fake.py::TestFake::test_poisons_its_process
core test_fake.py::TestFake::test_sees_a_clean_process
core test_fake.py::TestFake::test_breaks_under_the_pool
wide test_fake.py::TestFake::test_skips
wide test_fake.py::TestFake::test_hangs
wide test_fake.py::TestFake::test_oom_needs_the_device_alone
"""


@pytest.fixture
def fakes(tmp_path):
    """A tests folder as get_torch_tests.sh leaves it, with fakes for torch and for the allocator."""
    tests = tmp_path / "torch_tests"
    (tests / "torch").mkdir(parents=True)
    (tests / "expecttest.py").write_text("")
    (tests / "psutil.py").write_text("")
    (tests / "fake_state.py").write_text("poisoned = False\n")
    (tests / "torch" / "__init__.py").write_text(textwrap.dedent("""\
        __version__ = "0.fake"
        class cuda:
            is_available = staticmethod(lambda: True)
        """))
    (tests / "fakepool.py").write_text("import os\n\ndef install():\n    os.environ['FAKEPOOL_INSTALLED'] = '1'\n")
    (tests / "test_fake.py").write_text(FAKE_TESTS)
    (tmp_path / "selection.txt").write_text(SELECTION)
    return tmp_path


def run_runner(root, *extra):
    out = root / "result.json"
    done = subprocess.run([sys.executable, str(RUNNER), "--list", str(root / "selection.txt"), "--tests-dir",
                           str(root / "torch_tests"), "--install", "fakepool:install", "--json", str(out),
                           *extra], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, json.loads(out.read_text())


def results(data):
    return {t["id"].split("::")[-1]: (t["native"]["result"], t["tracepool"]["result"]) for t in data["tests"]}


def test_each_test_in_its_own_process_with_timeouts_and_the_regressions_listed(fakes):
    stdout, data = run_runner(fakes, "--set", "wide", "--timeout", "4", "--budget", "120")
    assert results(data) == {
        "test_poisons_its_process": ("fail", "fail"),
        "test_sees_a_clean_process": ("pass", "pass"),  # the poisoned process was another one
        "test_breaks_under_the_pool": ("pass", "fail"),
        "test_skips": ("skip", "skip"),
        "test_hangs": ("timeout", "timeout"),
        "test_oom_needs_the_device_alone": ("pass", "pass"),
    }
    by_name = {t["id"].split("::")[-1]: t for t in data["tests"]}
    assert by_name["test_oom_needs_the_device_alone"]["alone"] and not by_name["test_skips"]["alone"]
    assert "broken under the pool" in by_name["test_breaks_under_the_pool"]["tracepool"]["detail"]
    assert data["summary"]["core"] == {"tests": 3, "native_pass": 2, "tracepool_pass": 1, "not_run": 0,
                                       "regressions": ["test_fake.py::TestFake::test_breaks_under_the_pool"],
                                       "exceptions": {}, "exceptions_passing": []}
    assert data["summary"]["wide"]["native_pass"] == 3 and data["summary"]["wide"]["tests"] == 6
    assert "core set: native 2 of 3 pass, tracepool 1 of 3 pass" in stdout
    assert "passes natively, not under tracepool: test_fake.py::TestFake::test_breaks_under_the_pool" in stdout


def test_what_the_budget_leaves_out_is_reported_not_run(fakes):
    stdout, data = run_runner(fakes, "--set", "core", "--budget", "0")
    assert set(results(data).values()) == {("not run", "not run")} and len(data["tests"]) == 3
    assert data["summary"]["core"]["not_run"] == 3 and data["summary"]["core"]["regressions"] == []
    assert stdout.count("not run") >= 3


def test_a_hook_that_fails_is_not_counted_as_tracepool_passing(fakes):
    (fakes / "torch_tests" / "fakepool.py").write_text("def install():\n    raise RuntimeError('no CUDA here')\n")
    _, data = run_runner(fakes, "--set", "core", "--budget", "60")
    hooked = {name: pool for name, (_, pool) in results(data).items()}
    assert set(hooked.values()) == {"hook failed"}
    assert "RuntimeError: no CUDA here" in data["tests"][1]["tracepool"]["detail"]


def test_missing_test_files_skip_cleanly_naming_the_script_that_fetches_them(fakes):
    (fakes / "torch_tests" / "test_fake.py").unlink()
    stdout, data = run_runner(fakes)
    assert stdout.startswith("SKIP: ") and "get_torch_tests.sh" in stdout and "test_fake.py" in stdout
    assert data["skipped"] and data["tests"] == []


def test_missing_expecttest_or_device_skip_cleanly(fakes):
    (fakes / "torch_tests" / "expecttest.py").unlink()
    stdout, _ = run_runner(fakes)
    assert stdout.startswith("SKIP: PyTorch's own tests: expecttest or psutil missing") and "get_torch_tests.sh" in stdout
    (fakes / "torch_tests" / "expecttest.py").write_text("")
    (fakes / "torch_tests" / "torch" / "__init__.py").write_text(
        "__version__ = '0.fake'\nclass cuda:\n    is_available = staticmethod(lambda: False)\n")
    stdout, _ = run_runner(fakes)
    assert stdout.startswith("SKIP: PyTorch's own tests: torch 0.fake sees no CUDA device"), stdout


def test_a_named_exception_is_counted_apart_with_its_reason_and_told_when_it_passes(fakes):
    selection = fakes / "selection.txt"
    selection.write_text(SELECTION.replace(
        "core test_fake.py::TestFake::test_breaks_under_the_pool",
        "core test_fake.py::TestFake::test_breaks_under_the_pool except: the pool lacks what it needs").replace(
        "core test_fake.py::TestFake::test_sees_a_clean_process",
        "core test_fake.py::TestFake::test_sees_a_clean_process except: a stale reason"))
    stdout, data = run_runner(fakes, "--set", "core", "--budget", "60")
    core = data["summary"]["core"]
    assert core["regressions"] == []
    assert core["exceptions"] == {"test_fake.py::TestFake::test_breaks_under_the_pool": "the pool lacks what it needs"}
    assert core["exceptions_passing"] == ["test_fake.py::TestFake::test_sees_a_clean_process"]
    assert "named exception: test_fake.py::TestFake::test_breaks_under_the_pool: the pool lacks what it needs" in stdout
    assert "despite its named exception: test_fake.py::TestFake::test_sees_a_clean_process" in stdout
    selection.write_text("core test_fake.py::TestFake::test_skips except:   \n")
    done = subprocess.run([sys.executable, str(RUNNER), "--list", str(selection), "--tests-dir",
                           str(fakes / "torch_tests")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "except: REASON" in done.stderr, "a reason left empty is a broken selection"
