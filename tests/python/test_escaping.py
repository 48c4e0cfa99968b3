"""Control characters from a report never reach the terminal raw: `merge` and `diff` text and the command
line's own error lines show them escaped (tracepool/_escaping.py), by the rule the library's text report uses.
A shared report could otherwise set the terminal's title, clear the screen or fake lines."""

import json
import os
import subprocess
import sys

import pytest

# Sets the terminal's title (ESC ... BEL), clears the screen, fakes lines, flips the text right to left; a
# file name cannot hold the NUL that a report's strings may.
HOSTILE_NAME = "\x1b]0;pwned\x07\x1b[2J\rfake\nline\u202e"
NAME_SHOWN = "\\x1b]0;pwned\\x07\\x1b[2J\\x0dfake\\x0aline\\u202e"
HOSTILE, SHOWN = HOSTILE_NAME + "\x00", NAME_SHOWN + "\\x00"
RAW = ("\x1b", "\x07", "\r", "\x00", "\u202e")

PROGRAM = """\
import sys, tracepool
kept = []
with tracepool.tag(sys.argv[1]):
    kept.append(tracepool.alloc(1 << 20))
"""


def test_the_rule_escapes_controls_bidi_marks_and_undecodable_bytes_and_nothing_else():
    from tracepool._escaping import escape

    assert escape("".join(map(chr, range(0x20)))) == "".join("\\x%02x" % c for c in range(0x20))
    assert escape("\x7f\x80\x9f") == "\\x7f\\x80\\x9f"
    assert escape("\u200e\u200f\u2028\u2029\u202a\u202e\u2066\u2069") == \
        "\\u200e\\u200f\\u2028\\u2029\\u202a\\u202e\\u2066\\u2069"
    assert escape(os.fsdecode(b"r\xff\x80.json")) == "r\\xff\\x80.json"  # surrogateescape: the original bytes
    kept = " ~\\x1b \u00a0\u00e9\u200d\u2065\u206a\u4e2d\U0001f600 \\ \"'"
    assert escape(kept) == kept


def cli(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "TRACEPOOL_REPORT")}
    env["TRACEPOOL_CONF"] = "backend:host"
    return subprocess.run([sys.executable, "-m", "tracepool", *args], env=env, cwd=cwd, capture_output=True,
                          timeout=300)


def hostile_report(tmp_path, name, tag):
    """A report whose file name, tags, host and frames' function and file carry HOSTILE."""
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    saved = tmp_path / "plain.json"
    done = cli("run", "--no-torch", "--no-holders", "-o", str(saved), str(program), tag, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads(saved.read_text())
    data["process"]["host"] = "host" + HOSTILE
    for site in data["leaks"] + data["cached"]:
        site["tags"] = [t + HOSTILE for t in site["tags"]]
        for frame in site["frames"]:
            if frame["kind"] == "python":
                frame["function"] += HOSTILE
                frame["file"] = os.path.join(os.path.dirname(frame["file"]), "prog" + HOSTILE + ".py")
    path = tmp_path / (name + HOSTILE_NAME + ".json")
    path.write_text(json.dumps(data))
    return path.name


def assert_escaped(text, shown=SHOWN):
    for raw in RAW:
        assert raw not in text, (raw, text)
    assert shown in text, text


@pytest.mark.parametrize("command", ["merge", "diff"])
def test_merge_and_diff_text_show_every_string_from_a_report_escaped(command, tmp_path):
    first, second = hostile_report(tmp_path, "a", "one"), hostile_report(tmp_path, "b", "two")
    done = cli(command, first, second, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode("utf-8")
    assert_escaped(text)
    assert "a%s.json" % NAME_SHOWN in text  # the file name, and merge's label of the report
    assert "<module>%s (prog%s.py:4) \u2190 " % (SHOWN, SHOWN) in text  # function and file
    assert "[one%s]" % SHOWN in text  # a tag
    if command == "merge":
        assert "on host%s, exit" % SHOWN in text
    # JSON keeps the strings as they are: json.dumps escapes them for JSON.
    data = json.loads(cli(command, "--format", "json", first, second, cwd=tmp_path).stdout)
    assert any(HOSTILE in s["where"] for s in data["sites"])


def test_error_lines_show_file_names_escaped(tmp_path):
    for args in (["report", "no" + HOSTILE_NAME + ".json"], ["merge", "no" + HOSTILE_NAME + ".json"],
                 ["diff", "no" + HOSTILE_NAME + ".json", "x.json"], ["run", "no" + HOSTILE_NAME + ".py"]):
        done = cli(*args, cwd=tmp_path)
        assert done.returncode == 2, done
        line = done.stderr.decode("utf-8")
        assert line.count("\n") == 1 and line.endswith("\n"), line
        assert_escaped(line, "no%s." % NAME_SHOWN)


def test_a_file_name_that_is_not_utf8_is_read_and_named_by_its_bytes(tmp_path):
    saved = os.fsdecode(hostile_report(tmp_path, "plain", "tag"))
    undecodable = os.fsdecode(b"r\xff.json")
    os.rename(tmp_path / saved, tmp_path / undecodable)
    done = cli("report", undecodable, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (tmp_path / undecodable).write_text("not json")
    done = cli("report", undecodable, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.decode().startswith("tracepool: report: r\\xff.json"), done.stderr
