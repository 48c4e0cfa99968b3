"""What `report`, `merge` and `diff` read and write under hostile conditions: an input without end
(/dev/zero) or far larger than any report is refused once a cap is passed, without reading it whole; a
stdout that cannot be written (a full disk, a reader that left) is one line, or nothing, and status 2."""

import os
import resource
import subprocess
import sys

import pytest

COMMANDS = [["report"], ["merge"], ["diff", "{good}"]]
MEMORY_LIMIT = 6 << 30  # below what reading /dev/zero or a 20 GB file whole needs, above a read to the 4 GiB cap

LEAKER = """\
import tracepool
kept = [tracepool.alloc(1 << 20) for _ in range(3)]
"""


def cli(*args, cwd, stdout=subprocess.PIPE, limit_memory=False):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "TRACEPOOL_REPORT")}
    env["TRACEPOOL_CONF"] = "backend:host"

    def cap_memory():  # the child only: an unbounded read fails fast instead of filling the machine
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    return subprocess.run([sys.executable, "-m", "tracepool", *map(str, args)], env=env, cwd=cwd, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=300,
                          preexec_fn=cap_memory if limit_memory else None)


@pytest.fixture
def good(tmp_path):
    program = tmp_path / "leaker.py"
    program.write_text(LEAKER)
    saved = tmp_path / "good.json"
    done = cli("run", "--no-torch", "--no-holders", "-o", saved, program, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return saved


def command_reading(command, good, path):
    """`command` with `path` as the file it reads last."""
    return [arg.format(good=good) for arg in command] + [path]


def assert_one_line(done, *says):
    assert done.returncode == 2, done
    assert done.stdout in ("", None)
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("tracepool: "), done.stderr
    assert "Traceback" not in done.stderr
    for text in says:
        assert text in done.stderr, done.stderr


def test_an_endless_input_is_refused_at_the_default_cap(tmp_path):
    done = cli("report", "/dev/zero", cwd=tmp_path, limit_memory=True)
    assert_one_line(done, "report: /dev/zero is larger than the 4.00 GiB cap", "--max-input-size BYTES")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_an_endless_input_is_read_no_further_than_the_cap(command, good, tmp_path):
    done = cli(*command_reading(command, good, "/dev/zero"), "--max-input-size", "1MiB", cwd=tmp_path,
               limit_memory=True)
    assert_one_line(done, "%s: /dev/zero is larger than the 1.00 MiB cap" % command[0], "--max-input-size BYTES")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_file_larger_than_the_cap_is_refused_without_being_read(command, good, tmp_path):
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:
        f.truncate(20 * 10**9)  # sparse: 20 GB that take no disk
    done = cli(*command_reading(command, good, huge), cwd=tmp_path, limit_memory=True)
    assert_one_line(done, "%s: %s is larger than the 4.00 GiB cap" % (command[0], huge), "--max-input-size BYTES")


def test_the_cap_is_set_or_lifted_by_max_input_size(good, tmp_path):
    size = good.stat().st_size
    done = cli("report", "--max-input-size", size - 1, good, cwd=tmp_path)
    assert_one_line(done, "%s is larger than the " % good, "--max-input-size")
    assert cli("report", "--max-input-size", size, good, cwd=tmp_path).returncode == 0
    assert cli("merge", "--max-input-size", "1KiB", good, good, cwd=tmp_path).returncode == 2
    for lifted in ("0", "4GiB", "1.5MiB"):
        done = cli("diff", "--max-input-size", lifted, good, good, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    for bad in ("lots", "-1", "1.5B", "1XB"):
        done = cli("report", "--max-input-size", bad, good, cwd=tmp_path)
        assert done.returncode == 2 and "--max-input-size" in done.stderr and "Traceback" not in done.stderr, done


@pytest.mark.parametrize("command", [["report", "{good}"], ["merge", "{good}", "{good}"],
                                     ["diff", "{good}", "{good}"], ["report", "--format", "json", "{good}"]],
                         ids=["report", "merge", "diff", "report-json"])
def test_a_full_stdout_is_one_line_and_status_2(command, good, tmp_path):
    with open("/dev/full", "w") as full:
        done = cli(*[arg.format(good=good) for arg in command], cwd=tmp_path, stdout=full)
    assert_one_line(done, "tracepool: %s: cannot write to stdout: No space left on device" % command[0])


@pytest.mark.parametrize("command", [["report", "{good}"], ["merge", "{good}", "{good}"], ["diff", "{good}", "{good}"]],
                         ids=lambda c: c[0])
def test_a_reader_that_left_ends_the_output_quietly(command, good, tmp_path):
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `| head -1` does once it has its line
    try:
        done = cli(*[arg.format(good=good) for arg in command], cwd=tmp_path, stdout=write_end)
    finally:
        os.close(write_end)
    assert done.returncode == 2
    assert done.stderr == ""



@pytest.mark.parametrize("command", [["report", "{good}"], ["merge", "{good}", "{good}"], ["diff", "{good}", "{good}"]],
                         ids=lambda c: c[0])
@pytest.mark.parametrize("where", ["missing/folder/out.txt", "a_folder", "/dev/full"])
def test_an_output_path_that_cannot_be_written_is_one_line_and_status_2(command, where, good, tmp_path):
    """As `run -o` is: status 2 (a mistake in what was asked, not a failure of the reports read), one line naming
    the path, nothing written. /dev/full passes the check and fails the write itself."""
    (tmp_path / "a_folder").mkdir()
    path = where if where.startswith("/") else str(tmp_path / where)
    before = sorted(os.listdir(tmp_path))
    done = cli(*[arg.format(good=good) for arg in command[:1]], "-o", path,
               *[arg.format(good=good) for arg in command[1:]], cwd=tmp_path)
    assert_one_line(done, "tracepool: %s: -o: " % command[0], path)
    assert sorted(os.listdir(tmp_path)) == before
