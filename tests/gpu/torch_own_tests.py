"""PyTorch's own tests (its test_cuda.py and test_cuda_multigpu.py) run natively and under tracepool, side
by side (issue 32); tests/gpu/run.sh runs it as TRACEPOOL_GPU_STEPS=torch_tests.

    torch_own_tests.py [--set core|wide] [--list FILE] [--tests-dir DIR] [--jobs N] [--timeout S]
                       [--budget S] [--json PATH] [--install MODULE:FUNCTION] [--python EXE]

The selection is tests/gpu/torch_own_tests.txt (TAG FILE::CLASS::TEST a line; --set wide runs every line,
core those tagged core). Every test runs twice, each time in a process of its own, `python -m pytest -q
-p no:cacheprovider FILE::CLASS::TEST`, so a failed capture or a leaked graph in one test cannot poison
the next: once natively and once with tracepool installed as PyTorch's allocator before anything touches
CUDA (Note [The install hook]). N processes run at a time, except the tests of Note [Tests that run
alone]. Core tests go first, so a budget too short for everything still finishes them; tests the budget
(--budget seconds) leaves out are reported "not run", never dropped.

One line a test as both its runs end (native result, tracepool result and, where tracepool's fails, the
error's line), then a summary: how many pass natively, how many under tracepool, and the tests that
pass natively but not under tracepool. --json writes all of it. Results: pass, xfail (an expected
failure that failed: counts as a pass), fail, error, skip, timeout, crash (a signal, or no result),
missing (pytest found no such test), hook failed (tracepool not installed), not run. Exit status 0
unless the runner itself broke (2); what counts as a FAIL is for run.sh to say. Where the test files,
expecttest or psutil are missing (tests/gpu/get_torch_tests.sh fetches them), or no CUDA device is
seen, it prints one SKIP line saying why and exits 0.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

HERE = Path(__file__).resolve().parent
OK = ("pass", "xfail")
START_MARGIN_S = 5  # no test starts with less of the budget left: it could not finish
LOG_TAIL_LINES = 40

# Note [Tests that run alone]
# A test runs with no other test beside it when it fills or exhausts the device (out-of-memory tests,
# large tensors), sets a per-process memory fraction (computed from what the device has free, which
# other processes change), measures memory device-wide (mem_get_info, the driver-API leak check, NVML)
# or uses every GPU (all of test_cuda_multigpu.py).
ALONE_NAMES = re.compile(r"oom|out_of_memory|memory_fraction|limited_memory|max_split_expandable|"
                         r"garbage_collect_expandable|mem_get_info|memory_leak_detection$|device_memory_used|"
                         r"cublas_workspace_memory|kernel_loop_overflow|huge|large")
ALONE_FILES = ("test_cuda_multigpu.py",)

# Note [The install hook]
# The tracepool runs put a folder holding only this sitecustomize.py first on PYTHONPATH. Python imports
# it at start-up, before pytest and the test file: it calls the MODULE:FUNCTION that --install names
# (tracepool.torch.install) and writes "PID outcome" to a log the runner reads, so a test whose process
# did not get tracepool is reported "hook failed" rather than counted as tracepool's pass. Processes a
# test starts inherit the environment and so get tracepool too. The environment's own sitecustomize, if
# any, still runs, first.
HOOK = '''"""Written by tests/gpu/torch_own_tests.py: Note [The install hook]."""
import os


def _run_next_sitecustomize():
    import importlib.machinery
    import importlib.util
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def _install():
    spec = os.environ.get("TRACEPOOL_OWN_TESTS_HOOK")
    if not spec:
        return
    try:
        import importlib
        module, _, function = spec.partition(":")
        getattr(importlib.import_module(module), function)()
        outcome = "installed"
    except BaseException as e:  # reported by the runner; the process goes on with PyTorch's allocator
        outcome = "failed: %s: %s" % (type(e).__name__, e)
    log = os.environ.get("TRACEPOOL_OWN_TESTS_HOOK_LOG")
    if log:
        with open(log, "a") as f:
            f.write("%d %s\\n" % (os.getpid(), " ".join(outcome.split())))


_run_next_sitecustomize()
_install()
'''

# Run in a child before any test, with the module --install names as its argument: prints why the tests
# cannot run and exits 3, or exits 0. One process, since importing torch takes seconds.
PREFLIGHT = """
import sys


def cannot(why):
    print(why)
    sys.exit(3)


try:
    import expecttest, psutil
except ImportError as e:
    cannot("expecttest or psutil missing (%s): FETCH" % e)
try:
    import torch
except ImportError as e:
    cannot("no torch (%s)" % e)
if not torch.cuda.is_available():
    cannot("torch %s sees no CUDA device" % torch.__version__)
try:
    __import__(sys.argv[1])
except Exception as e:
    cannot("%s cannot be imported (%s: %s)" % (sys.argv[1], type(e).__name__, e))
"""


class Test:
    """One line of the selection; `exception`: why tracepool is known not to pass it (Note [Named exceptions])."""

    def __init__(self, node_id, tag, exception=None):
        self.node_id, self.tag, self.exception = node_id, tag, exception
        self.file = node_id.split("::")[0]
        self.name = node_id.split("::")[-1]
        self.alone = self.file in ALONE_FILES or bool(ALONE_NAMES.search(self.name))
        self.results = {}  # mode -> result dict


# Note [Named exceptions]
# A test tracepool is known not to pass carries its reason on its line: "TAG ID except: REASON". When it
# passes natively and not under tracepool it is counted apart ("exceptions"), with the reason, not as a
# regression, so the check stays green while the reason stands; one that passes under tracepool after
# all is listed ("exceptions_passing"), so that the line can lose its reason.
EXCEPT = " except: "


def read_selection(path, which):
    """The tests of `which` ("core"; "wide", which holds every line; "rest", the wide lines alone, for a
    second call after a core one), in the file's order, core first."""
    tests = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        line, _, exception = line.partition(EXCEPT)
        fields = line.split()
        if (len(fields) != 2 or fields[0] not in ("core", "wide") or fields[1].count("::") < 1
                or (_ and not exception.strip())):
            raise ValueError("%s:%d: expected 'core|wide FILE::CLASS::TEST [except: REASON]', not %r"
                             % (path, number, line))
        if which == "wide" or fields[0] == ("wide" if which == "rest" else "core"):
            tests.append(Test(fields[1], fields[0], exception.strip() or None))
    return sorted(tests, key=lambda t: t.tag != "core")


def child_env(tests_dir, hook_dir=None, hook_log=None, install=None):
    """The environment of a test's process: the tests folder (test files, expecttest, psutil) on
    PYTHONPATH, and for a tracepool run the hook's folder before it."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    paths = [str(p) for p in (hook_dir, tests_dir) if p] + [p for p in [env.get("PYTHONPATH")] if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    for key in ("TRACEPOOL_OWN_TESTS_HOOK", "TRACEPOOL_OWN_TESTS_HOOK_LOG"):
        env.pop(key, None)
    if hook_dir:
        env["TRACEPOOL_OWN_TESTS_HOOK"] = install
        env["TRACEPOOL_OWN_TESTS_HOOK_LOG"] = str(hook_log)
    return env


def why_skip(args, tests):
    """None when the tests can run, else the reason they cannot (one line)."""
    fetch = "run tests/gpu/get_torch_tests.sh %s on a machine with network and carry it here" % args.tests_dir
    missing = sorted({t.file for t in tests if not (args.tests_dir / t.file).is_file()})
    if missing:
        return "no %s in %s: %s" % (", ".join(missing), args.tests_dir, fetch)
    module = args.install.partition(":")[0]
    done = subprocess.run([args.python, "-c", PREFLIGHT, module], env=child_env(args.tests_dir),
                          capture_output=True, text=True, timeout=300)
    if done.returncode == 0:
        return None
    why = last_line(done.stdout) if done.returncode == 3 else "preflight exit %d: %s" % (
        done.returncode, last_line(done.stderr))
    return why.replace("FETCH", fetch)


class Job:
    """One run of one test: a pytest process of its own, in a process group of its own."""

    def __init__(self, test, mode):
        self.test, self.mode = test, mode
        self.proc = None

    def start(self, args, work, hook_dir, limit_s, budget_cut):
        stem = "%s.%s" % (re.sub(r"[^A-Za-z0-9_.-]", "_", self.test.node_id), self.mode)
        self.junit, self.log_path, self.hook_log = (work / (stem + s) for s in (".xml", ".log", ".hook"))
        tracepool = self.mode == "tracepool"
        env = child_env(args.tests_dir, hook_dir if tracepool else None, self.hook_log, args.install)
        command = [args.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(work / "pytest.ini"),
                   "--rootdir", str(args.tests_dir), "--junit-xml", str(self.junit), self.test.node_id]
        self.limit_s, self.budget_cut = limit_s, budget_cut  # budget_cut: the budget, not --timeout, set the limit
        self.started = time.monotonic()
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(command, cwd=args.tests_dir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def overdue(self):
        return time.monotonic() - self.started > self.limit_s

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own group: the test's children go too
        except ProcessLookupError:
            pass
        self.proc.wait()

    def result(self, timed_out):
        seconds = round(time.monotonic() - self.started, 1)
        outcome, detail = classify(self, timed_out)
        result = {"result": outcome, "seconds": seconds, "detail": detail}
        if outcome not in OK + ("skip",):
            lines = self.log_path.read_text(errors="replace").splitlines()
            result["log_tail"] = lines[-LOG_TAIL_LINES:]
        return result


def classify(job, timed_out):
    """(result, detail) of a finished job, from its JUnit file, exit status, output and hook log."""
    if timed_out:
        if job.budget_cut:
            return "not run", "the budget ran out %.0f s into it" % job.limit_s
        return "timeout", "killed after %.0f s" % job.limit_s
    output = job.log_path.read_text(errors="replace")
    if job.mode == "tracepool":
        hooked = hook_outcome(job.hook_log, job.proc.pid)
        if hooked != "installed":
            return "hook failed", hooked
    case = junit_case(job.junit)
    code = job.proc.returncode
    if case is None:
        if code == 4 or "not found:" in output or "no match in any of" in output:
            return "missing", last_line(output)
        if code < 0:
            return "crash", "signal %d: %s" % (-code, last_line(output))
        return "error", "exit %d, no result: %s" % (code, last_line(output))
    outcome, detail = case
    if code < 0:  # the test ended, then the process died (at exit, say): not a pass
        return "crash", "%s, then signal %d: %s" % (outcome, -code, last_line(output))
    return outcome, detail


def hook_outcome(hook_log, pid):
    """What the hook wrote for process `pid`: "installed", "failed: ...", or why nothing is known."""
    try:
        lines = hook_log.read_text().splitlines()
    except OSError:
        return "the install hook did not run (no sitecustomize import?)"
    for line in lines:
        logged_pid, _, outcome = line.partition(" ")
        if logged_pid == str(pid):
            return outcome
    return "the install hook did not run in the test's own process"


def junit_case(path):
    """(result, detail) of the one test case in a JUnit file; None when it holds none."""
    try:
        case = next(ElementTree.parse(path).getroot().iter("testcase"), None)
    except (OSError, ElementTree.ParseError):
        return None
    if case is None:
        return None
    for tag, outcome in (("failure", "fail"), ("error", "error")):
        node = case.find(tag)
        if node is not None:
            return outcome, error_line(node.get("message", ""), node.text or "")
    node = case.find("skipped")
    if node is not None:
        outcome = "xfail" if node.get("type") == "pytest.xfail" else "skip"
        return outcome, first_line(node.get("message", ""))
    return "pass", ""


def error_line(message, text):
    """The line that says what went wrong: the exception's message, else the last 'E ' line."""
    line = first_line(message)
    if line:
        return line
    errors = [t[1:].strip() for t in text.splitlines() if t.startswith("E ")]
    return errors[-1][:300] if errors else last_line(text)


def first_line(text):
    lines = [t.strip() for t in text.splitlines() if t.strip()]
    return lines[0][:300] if lines else ""


def last_line(text):
    lines = [t.strip() for t in text.splitlines() if t.strip()]
    return lines[-1][:300] if lines else ""


def schedule(tests):
    """The jobs in the order they start: per tag (core first), the tests that may run beside others,
    then those that run alone; each test's native and tracepool runs next to each other."""
    order = []
    for tag in ("core", "wide"):
        for alone in (False, True):
            for test in tests:
                if test.tag == tag and test.alone == alone:
                    order += [Job(test, "native"), Job(test, "tracepool")]
    return order


def run_all(args, tests, work, report):
    """Runs every job within the budget; `report(test)` is called as a test's second run ends."""
    hook_dir = work / "hook"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(HOOK)
    (work / "pytest.ini").write_text("[pytest]\n")  # the repository's own pytest settings stay out
    deadline = time.monotonic() + args.budget
    queue, running = schedule(tests), []
    while queue or running:
        for job in [j for j in running if j.proc.poll() is not None or j.overdue()]:
            timed_out = job.proc.poll() is None
            if timed_out:
                job.kill()
            running.remove(job)
            finish(job, job.result(timed_out), report)
        while queue and fits(queue[0], running, args.jobs):
            left = deadline - time.monotonic()
            if left < START_MARGIN_S:
                for job in queue:
                    finish(job, {"result": "not run", "seconds": 0, "detail": "time budget spent"}, report)
                queue = []
                break
            job = queue.pop(0)
            job.start(args, work, hook_dir, min(args.timeout, left), left < args.timeout)
            running.append(job)
        time.sleep(0.05)


def fits(job, running, jobs):
    """Whether `job` may start beside `running` (Note [Tests that run alone])."""
    if job.test.alone or any(j.test.alone for j in running):
        return not running
    return len(running) < jobs


def finish(job, result, report):
    job.test.results[job.mode] = result
    if len(job.test.results) == 2:
        report(job.test)


def line_for(test, index, total):
    native, pool = test.results["native"], test.results["tracepool"]
    line = "[%3d/%d] %-4s %-72s native %-11s tracepool %-11s" % (
        index, total, test.tag, test.node_id.split("::", 1)[1][:72], native["result"], pool["result"])
    if pool["result"] not in OK and pool["detail"]:
        line += " " + pool["detail"][:200]
    return line.rstrip()


def summarize(tests):
    """Counts per set: every set holds the core tests; wide holds all."""
    sets = {}
    if any(t.tag == "core" for t in tests):
        sets["core"] = [t for t in tests if t.tag == "core"]
    if any(t.tag == "wide" for t in tests):
        sets["wide" if "core" in sets else "rest"] = tests
    summary = {}
    for name, chosen in sets.items():
        passed = {m: [t for t in chosen if t.results[m]["result"] in OK] for m in ("native", "tracepool")}
        short = [t for t in passed["native"] if t.results["tracepool"]["result"] not in OK + ("not run",)]
        summary[name] = {
            "tests": len(chosen),
            "native_pass": len(passed["native"]),
            "tracepool_pass": len(passed["tracepool"]),
            "regressions": [t.node_id for t in short if not t.exception],
            "exceptions": {t.node_id: t.exception for t in short if t.exception},
            "exceptions_passing": [t.node_id for t in passed["tracepool"] if t.exception],
            "not_run": sum(1 for t in chosen if "not run" in (t.results["native"]["result"],
                                                               t.results["tracepool"]["result"])),
        }
    return summary


def print_summary(summary, tests):
    by_id = {t.node_id: t for t in tests}
    for name, s in summary.items():
        print("%s set: native %d of %d pass, tracepool %d of %d pass, %d pass natively but not under "
              "tracepool (%d of them named exceptions), %d not run"
              % (name, s["native_pass"], s["tests"], s["tracepool_pass"], s["tests"],
                 len(s["regressions"]) + len(s["exceptions"]), len(s["exceptions"]), s["not_run"]))
    last = list(summary.values())[-1]
    for node_id in last["regressions"]:
        pool = by_id[node_id].results["tracepool"]
        print("  passes natively, not under tracepool: %s (%s: %s)" % (node_id, pool["result"], pool["detail"]))
    for node_id, reason in last["exceptions"].items():
        print("  named exception: %s: %s" % (node_id, reason))
    for node_id in last["exceptions_passing"]:
        print("  passes under tracepool despite its named exception: %s" % node_id)


def write_json(path, args, tests, summary, skipped, elapsed, selected):
    if not path:
        return
    data = {"set": args.set, "list": str(args.list), "tests_dir": str(args.tests_dir), "python": args.python,
            "install": args.install, "jobs": args.jobs, "timeout_s": args.timeout, "budget_s": args.budget,
            "elapsed_s": round(elapsed, 1), "skipped": skipped, "selected": selected, "summary": summary,
            "tests": [{"id": t.node_id, "tag": t.tag, "alone": t.alone, **t.results} for t in tests]}
    Path(path).write_text(json.dumps(data, indent=1) + "\n")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=("core", "wide", "rest"), default="wide",
                        help="core; wide (everything); rest (wide less core)")
    parser.add_argument("--match", help="only the tests of the set whose node id this regular expression finds")
    parser.add_argument("--list", type=Path, default=HERE / "torch_own_tests.txt")
    parser.add_argument("--tests-dir", type=Path, default=HERE / "torch_tests")
    parser.add_argument("--jobs", type=int, default=6, help="processes at a time (default 6)")
    parser.add_argument("--timeout", type=float, default=240, help="seconds one run may take (default 240)")
    parser.add_argument("--budget", type=float, default=480, help="seconds for everything (default 480)")
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--install", default="tracepool.torch:install",
                        help="MODULE:FUNCTION that installs the allocator under test (default tracepool.torch:install)")
    parser.add_argument("--python", default=sys.executable, help="the Python that runs pytest (default this one)")
    args = parser.parse_args(argv)
    args.tests_dir = args.tests_dir.resolve()
    return args


def main(argv=None):
    args = parse_args(argv)
    began = time.monotonic()
    tests = read_selection(args.list, args.set)
    if args.match:
        tests = [t for t in tests if re.search(args.match, t.node_id)]
    skipped = why_skip(args, tests)
    if skipped:
        print("SKIP: PyTorch's own tests: " + skipped)
        write_json(args.json, args, [], {}, skipped, time.monotonic() - began, len(tests))
        return 0
    print("PyTorch's own tests: %d (%s set) from %s, each natively and under %s; %d at a time, %.0f s each at "
          "most, %.0f s in all" % (len(tests), args.set, args.tests_dir, args.install, args.jobs, args.timeout,
                                   args.budget), flush=True)
    done = []

    def report(test):
        done.append(test)
        print(line_for(test, len(done), len(tests)), flush=True)

    work = Path(tempfile.mkdtemp(prefix="torch_own_tests."))
    try:
        run_all(args, tests, work, report)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = summarize(tests)
    print_summary(summary, tests)
    write_json(args.json, args, tests, summary, None, time.monotonic() - began, len(tests))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # the runner itself broke: say so, exit 2
        print("torch_own_tests.py: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        sys.exit(2)
