"""TRACEPOOL_REPORT in a Python program: the exit report is written however Python exits (normally,
by Ctrl-C, with daemon threads still allocating), once, and names what the program still held."""

import json
import signal

import pytest

KEPT = "kept = tracepool.alloc(3 << 20)  # KEPT\n"


def kept_line(script):
    return [i for i, text in enumerate(script.splitlines(), 1) if "# KEPT" in text][0]


def leaked_lines(report):
    """(file name, line) of the innermost Python frame of each leaked site."""
    lines = set()
    for site in report["leaks"]:
        python = [f for f in site["frames"] if f["kind"] == "python"]
        if python:
            lines.add((python[0]["file"].rsplit("/", 1)[-1], python[0]["line"]))
    return lines


@pytest.fixture
def exit_report(run_python, tmp_path):
    """Runs `script` with TRACEPOOL_REPORT=<tmp>/exit.json; returns (process, report dict)."""

    def run(script):
        path = tmp_path / "exit.json"
        done = run_python(script, timeout=60, env={"TRACEPOOL_REPORT": str(path)})
        assert path.exists(), "no report: rc %s, stderr %s" % (done.returncode, done.stderr)
        return done, json.loads(path.read_text())  # complete JSON, not half a report

    return run


def test_ctrl_c_at_top_level_still_writes_the_report(exit_report):
    script = "import tracepool\n" + KEPT + "raise KeyboardInterrupt\n"
    done, report = exit_report(script)
    assert done.returncode == -signal.SIGINT, done.stderr  # Python's own way to end after Ctrl-C
    assert "KeyboardInterrupt" in done.stderr
    assert report["reason"] == "exit"
    assert ("child.py", kept_line(script)) in leaked_lines(report)


def test_sigint_during_a_loop_still_writes_the_report(exit_report):
    # Ctrl-C as a terminal delivers it. A process started in the background by a shell without job
    # control inherits SIGINT ignored, and Python then installs no handler: restore the default one.
    script = (
        "import os, signal, tracepool\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        + KEPT
        + "for i in range(1000000):\n"
        "    tracepool.free(tracepool.alloc(4096))\n"
        "    if i == 100:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
    )
    done, report = exit_report(script)
    assert done.returncode == -signal.SIGINT, done.stderr
    assert ("child.py", kept_line(script)) in leaked_lines(report)


def test_a_normal_exit_writes_exactly_one_report(run_python):
    script = "import tracepool\n" + KEPT
    done = run_python(script, timeout=60, env={"TRACEPOOL_REPORT": "/dev/stderr"})
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("== tracepool report (exit)") == 1, done.stderr
    assert "child.py:%d)" % kept_line(script) in done.stderr


def test_daemon_threads_allocating_through_the_exit_do_no_harm(exit_report):
    script = (
        "import threading, tracepool\n"
        "started = threading.Barrier(5)\n"
        "def churn():\n"
        "    started.wait()\n"
        "    while True:\n"
        "        tracepool.free(tracepool.alloc(4096))\n"
        "for _ in range(4):\n"
        "    threading.Thread(target=churn, daemon=True).start()\n"
        + KEPT
        + "started.wait()\n"
    )
    done, report = exit_report(script)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert ("child.py", kept_line(script)) in leaked_lines(report)


FORK_WHILE_BUSY = """
import os, sys, threading, time, tracepool

stop = False
def churn(n):
    while not stop:
        with tracepool.tag("busy %d" % n):
            tracepool.free(tracepool.alloc(4096 * (1 + n)))
        if n == 0:
            tracepool.mark("busy")

threads = [threading.Thread(target=churn, args=(n,)) for n in range(4)]
for t in threads:
    t.start()
clean = hung = 0
for i in range(FORKS):
    time.sleep(0.002 * (i % 5))
    pid = os.fork()
    if pid == 0:
        # The child: its inherited tracepool works, and it exits through Python's own finalisation
        # (atexit handlers included) or, every other time, through os._exit.
        ptr = tracepool.alloc(1 << 20)
        tracepool.free(ptr)
        with tracepool.tag("child"):
            kept = tracepool.alloc(8192)
        assert "child" in tracepool.report(format="text")
        if i % 2:
            os._exit(0)
        sys.exit(0)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            clean += os.waitstatus_to_exitcode(status) == 0
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            hung += 1
            break
        time.sleep(0.005)
stop = True
for t in threads:
    t.join()
print("forks %d clean %d hung %d" % (FORKS, clean, hung))
"""


def test_children_forked_while_threads_allocate_work_and_exit(run_python):
    """DataLoader workers and multiprocessing fork while other threads allocate: every child must
    find tracepool usable and exit, through Python's finalisation too (issue 11, defect 2)."""
    done = run_python("FORKS = 16\n" + FORK_WHILE_BUSY, timeout=300, conf="backend:host,capture:all")
    assert done.returncode == 0, done.stderr
    assert "forks 16 clean 16 hung 0" in done.stdout, done.stdout + done.stderr
