"""No report lost (issue 31): output paths checked before the program starts, a report that cannot be
written at its path goes to the temporary folder, a forked child does not replace its parent's report,
SIGTERM writes the report and still ends the process, files under /dev/shm get their rank, a replaced
report keeps its mode, any name that fits can be replaced, and Ctrl-C ends a write its reader stalls."""

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

import tracepool

LEAK = "import tracepool\nkept = tracepool.alloc(3 << 20)\n"


def start(tmp_path, code, args=(), env=None, **kw):
    """A child Python running `code` (or `python -m tracepool run ARGS child.py`), on the host backend."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(code))
    argv = [sys.executable] + (["-m", "tracepool", "run", "--no-torch", *args] if args is not None else []) + [str(script)]
    child_env = dict(os.environ, TRACEPOOL_CONF="backend:host", TMPDIR=str(tmp_path / "tmp"), **(env or {}))
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.Popen(argv, env=child_env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


def finish(process, timeout=60):
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def leaked_bytes(path):
    return sum(site["bytes"] for site in json.loads(open(path).read())["leaks"])


# ---- Paths checked first, and the fallback at the end -----------------------------------------------


@pytest.mark.parametrize("option", ["-o", "--html", "TRACEPOOL_REPORT"])
def test_run_refuses_an_output_path_it_cannot_write_before_the_program_starts(tmp_path, option):
    bad = str(tmp_path / "missing" / "dir" / "r.json")
    ran = tmp_path / "ran"
    code = "open(%r, 'w').write('yes')\n" % str(ran)
    args = [] if option == "TRACEPOOL_REPORT" else [option, bad]
    rc, out, err = finish(start(tmp_path, code, args=args, env={"TRACEPOOL_REPORT": bad} if option == "TRACEPOOL_REPORT"
                                else None))
    assert rc == 2, err
    assert not ran.exists(), "the program ran"
    assert err.count("\n") == 1, err
    assert err.startswith("tracepool: run: %s: cannot write %s: %s: no such folder" % (option, bad, os.path.dirname(bad))), err


def test_run_says_how_to_open_what_it_wrote_and_the_command_works(tmp_path):
    """Issue 35: after writing a report, the command that opens it."""
    saved, page = tmp_path / "my reports" / "r.json", tmp_path / "r.html"
    saved.parent.mkdir()
    rc, out, err = finish(start(tmp_path, LEAK, args=["-o", str(saved), "--html", str(page)]))
    assert rc == 0, err
    assert "report written to %s; read it with: %s -m tracepool report '%s'\n" % (saved, sys.executable, saved) in err, err
    assert "report written to %s; open it in a browser: %s\n" % (page, page.resolve().as_uri()) in err, err
    command = err.split("read it with: ")[1].splitlines()[0]
    shown = subprocess.run(command, shell=True, capture_output=True, text=True,
                           env=dict(os.environ, TRACEPOOL_CONF="backend:host"), timeout=60)
    assert shown.returncode == 0 and "child.py" in shown.stdout, (command, shown.stdout, shown.stderr)
    # What is not a regular file of its own gets no command: stdout, even when the shell sent it to a file.
    rc, out, err = finish(start(tmp_path, LEAK, args=["-o", "/dev/stdout"]))
    assert rc == 0 and "report written to /dev/stdout\n" in err, err


def test_a_report_whose_folder_went_away_goes_to_the_temporary_folder(tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code = LEAK + "import os\nos.rmdir(%r)\n" % str(out_dir)
    rc, out, err = finish(start(tmp_path, code, args=["-o", str(out_dir / "r.json")]))
    assert rc == 1, err
    saved = list((tmp_path / "tmp").glob("tracepool-report-*.json"))
    assert len(saved) == 1, (list((tmp_path / "tmp").iterdir()), err)
    assert "the report went to %s instead; read it with: " % saved[0] in err, err
    assert "cannot write %s" % (out_dir / "r.json") in err, err
    assert stat.S_IMODE(saved[0].stat().st_mode) == 0o600
    assert leaked_bytes(saved[0]) >= 3 << 20


def test_the_exit_report_of_an_unwritable_path_is_said_at_once_and_kept_in_the_temporary_folder(tmp_path):
    bad = str(tmp_path / "missing" / "exit.json")
    rc, out, err = finish(start(tmp_path, LEAK, args=None, env={"TRACEPOOL_REPORT": bad}))
    assert rc == 0, err
    first, *rest = err.splitlines()
    assert first.startswith("tracepool: TRACEPOOL_REPORT=%s: cannot write %s" % (bad, bad)), err
    assert "the exit report will go to the temporary folder" in first
    saved = list((tmp_path / "tmp").glob("tracepool-report-*.json"))
    assert len(saved) == 1, err
    assert any("the report went to %s instead" % saved[0] in line for line in rest), err
    assert leaked_bytes(saved[0]) >= 3 << 20


# ---- A forked child -------------------------------------------------------------------------------

FORK = LEAK + """
import os, sys, time
parent = os.getpid()
if os.fork() == 0:  # the child frees what it inherited, outlives its parent, then exits normally
    tracepool.free(kept)
    while os.getppid() == parent:
        time.sleep(0.01)
    sys.exit(0)
"""


def test_a_forked_child_that_exits_last_leaves_the_parents_report_alone(tmp_path):
    path = tmp_path / "exit.json"
    process = start(tmp_path, FORK, args=None, env={"TRACEPOOL_REPORT": str(path)})
    rc, out, err = finish(process)  # stdout's pipe closes when the child exits too
    assert rc == 0, err
    assert leaked_bytes(path) >= 3 << 20, "the parent's report was replaced by the child's"
    assert sorted(p.name for p in tmp_path.glob("exit*")) == ["exit.json"]


def test_with_pid_in_the_path_each_process_writes_its_own(tmp_path):
    process = start(tmp_path, FORK, args=None, env={"TRACEPOOL_REPORT": str(tmp_path / "exit-{pid}.json")})
    rc, out, err = finish(process)
    assert rc == 0, err
    reports = sorted(tmp_path.glob("exit-*.json"))
    assert len(reports) == 2, err
    assert os.path.basename(reports[0]) != os.path.basename(reports[1])


# ---- SIGTERM ----------------------------------------------------------------------------------------

WAIT = LEAK + "import sys, time\nprint('ready', flush=True)\ntime.sleep(60)\n"


def terminated(process):
    assert process.stdout.readline() == "ready\n"
    process.send_signal(signal.SIGTERM)
    return finish(process)


def test_sigterm_writes_the_exit_report_then_ends_the_process_by_the_signal(tmp_path):
    path = tmp_path / "exit.json"
    rc, out, err = terminated(start(tmp_path, WAIT, args=None, env={"TRACEPOOL_REPORT": str(path)}))
    assert rc == -signal.SIGTERM, err
    assert leaked_bytes(path) >= 3 << 20


def test_sigterm_under_run_writes_its_report_then_ends_by_the_signal(tmp_path):
    path, exit_path = tmp_path / "r.json", tmp_path / "exit.json"
    rc, out, err = terminated(start(tmp_path, WAIT, args=["-o", str(path)], env={"TRACEPOOL_REPORT": str(exit_path)}))
    assert rc == -signal.SIGTERM, err
    assert "SIGTERM" in err and "Traceback" not in err, err
    assert leaked_bytes(path) >= 3 << 20
    assert leaked_bytes(exit_path) >= 3 << 20, "the TRACEPOOL_REPORT report too"


def test_a_program_that_handles_sigterm_itself_keeps_its_handler(tmp_path):
    path = tmp_path / "exit.json"
    code = "import signal, sys\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(3))\n" + WAIT
    rc, out, err = terminated(start(tmp_path, code, args=None, env={"TRACEPOOL_REPORT": str(path)}))
    assert rc == 3, err
    assert leaked_bytes(path) >= 3 << 20, "written at its exit"


# ---- Paths ------------------------------------------------------------------------------------------


def test_a_file_under_dev_shm_gets_the_rank_as_any_file(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert tracepool.report_path("/dev/shm/tpr/report.json") == "/dev/shm/tpr/report-rank1.json"
    assert tracepool.report_path("/dev/null") == "/dev/null"


def test_a_replaced_report_keeps_its_mode(tmp_path):
    path = tmp_path / "private.json"
    path.write_text("old")
    path.chmod(0o600)
    tracepool.write_report(str(path))
    assert json.loads(path.read_text())["schema"] == "tracepool.report/1"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("length", [245, 250, 255])
def test_a_name_that_fits_can_be_written_and_replaced(tmp_path, length):
    path = tmp_path / ("r" * (length - 5) + ".json")
    for _ in range(2):
        tracepool.write_report(str(path))
        assert json.loads(path.read_text())["schema"] == "tracepool.report/1"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


# ---- A reader that never reads ----------------------------------------------------------------------


def writing_to(pid, path):
    """Whether process `pid` has `path` open."""
    fds = "/proc/%d/fd" % pid
    try:
        return any(os.readlink(os.path.join(fds, fd)) == str(path) for fd in os.listdir(fds))
    except OSError:
        return False


def test_ctrl_c_ends_an_exit_report_write_that_its_reader_stalls(tmp_path):
    fifo = tmp_path / "report.json"  # a FIFO; JSON: the whole report, far more than the 64 KiB it buffers
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # held open, never read
    try:
        code = ("import signal, tracepool\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
                "kept = [tracepool.alloc(4096) for _ in range(100)]\n"
                "for i in range(2000):\n"
                "    with tracepool.tag('a tag long enough to make the report large %d' % i):\n"
                "        kept.append(tracepool.alloc(512))\n"
                "print('ready', flush=True)\n")
        process = start(tmp_path, code, args=None, env={"TRACEPOOL_REPORT": str(fifo)})
        assert process.stdout.readline() == "ready\n"
        while not writing_to(process.pid, fifo) and process.poll() is None:
            time.sleep(0.01)
        # Ctrl-C until it ends: one that lands before the write waits would find Python's handler alone.
        deadline = time.monotonic() + 30
        while process.poll() is None and time.monotonic() < deadline:
            process.send_signal(signal.SIGINT)
            time.sleep(0.3)
        rc, out, err = finish(process, timeout=30)
    finally:
        os.close(reader)
    assert "interrupted by SIGINT while waiting for its reader" in err, err
