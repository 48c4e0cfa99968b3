"""`python -m tracepool`: run, report, help and errors, in subprocesses on the host backend; the
library's text renderer (tracepool.render_report) on made-up stacks; and the demo,
examples/leaky_training.py, through the command line."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tracepool

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "leaky_training.py"
OPTIONS_OF_RUN = ["--conf", "--output", "-o", "--format", "--top", "--no-torch", "--no-cupy", "--no-numba", "-m"]


def tracepool_cli(*args, cwd=None, conf="backend:host"):
    env = dict(os.environ, TRACEPOOL_CONF=conf)
    env.pop("TRACEPOOL_REPORT", None)
    return subprocess.run(
        [sys.executable, "-m", "tracepool", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def line_of(path, marker):
    """The 1-based number of the only line of `path` that contains `marker`."""
    lines = [i for i, text in enumerate(Path(path).read_text().splitlines(), 1) if marker in text]
    assert len(lines) == 1, (marker, lines)
    return lines[0]


def python_frames(site):
    return [(f["file"], f["line"], f["function"]) for f in site["frames"] if f["kind"] == "python"]


def site_at(sites, file, line):
    """The sites of `sites` with a Python frame at file:line."""
    return [s for s in sites if any(f[:2] == (str(file), line) for f in python_frames(s))]


def section(text, heading):
    """The lines of one section of a text report, from its heading to the next blank line."""
    start = text.index(heading)
    end = text.find("\n\n", start)
    return text[start : end if end >= 0 else len(text)]


LEAKER = """\
import sys
import tracepool

kept = []


def leak(nbytes):
    kept.append(tracepool.alloc(nbytes))  # LEAK


for epoch in range(3):
    leak(1 << 20)
    tracepool.mark("epoch %d" % epoch)
"""


@pytest.fixture
def leaker(tmp_path):
    script = tmp_path / "leaker.py"
    script.write_text(LEAKER)
    return script


def test_run_prints_a_report_naming_the_line_and_function_that_leaked(leaker):
    done = tracepool_cli("run", leaker)
    assert done.returncode == 0, done.stderr
    leaked = section(done.stderr, "Leaked: memory still allocated at exit")
    assert "#1 3.00 MiB in 3 blocks  GROWING across marks: 1.00 MiB 2.00 MiB 3.00 MiB" in leaked
    assert "at leak (%s:%d)" % (leaker, line_of(leaker, "# LEAK")) in leaked


def test_run_writes_a_json_report_with_python_frames(leaker, tmp_path):
    out = tmp_path / "report.json"
    done = tracepool_cli("run", "--output", out, leaker)
    assert done.returncode == 0, done.stderr
    assert "== tracepool report" not in done.stderr
    report = json.loads(out.read_text())
    assert report["schema"] == "tracepool.report/1"
    assert report["reason"] == "exit"
    [site] = site_at(report["leaks"], leaker, line_of(leaker, "# LEAK"))
    assert site["bytes"] == 3 << 20 and site["blocks"] == 3 and site["growing"]
    assert python_frames(site)[0] == (str(leaker), line_of(leaker, "# LEAK"), "leak")


def test_format_overrides_the_extension_of_output(leaker, tmp_path):
    out = tmp_path / "report.json"
    done = tracepool_cli("run", "--format", "text", "-o", out, leaker)
    assert done.returncode == 0, done.stderr
    assert out.read_text().startswith("== tracepool report (exit)")


def test_run_m_runs_a_module_with_its_arguments(tmp_path):
    (tmp_path / "leaker_module.py").write_text(LEAKER + "print(sys.argv[1:])\n")
    done = tracepool_cli("run", "-m", "leaker_module", "--top", "x", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "['--top', 'x']\n"
    module = tmp_path / "leaker_module.py"
    assert "at leak (%s:%d)" % (module, line_of(module, "# LEAK")) in done.stderr


def test_script_arguments_reach_sys_argv_and_options_after_the_script_are_the_scripts(tmp_path):
    script = tmp_path / "args.py"
    script.write_text("import json, sys\nprint(json.dumps(sys.argv))\nprint(sys.path[0])\n")
    done = tracepool_cli("run", "--top", "2", script, "-o", "x.json", "--no-torch", "plain")
    assert done.returncode == 0, done.stderr
    argv, path0 = done.stdout.splitlines()
    assert json.loads(argv) == [str(script), "-o", "x.json", "--no-torch", "plain"]
    assert path0 == str(tmp_path)
    assert "== tracepool report (exit)" in done.stderr


def test_the_scripts_exit_status_is_kept(tmp_path):
    script = tmp_path / "exits.py"
    script.write_text("import sys\nsys.exit(3)\n")
    done = tracepool_cli("run", script)
    assert done.returncode == 3
    assert "== tracepool report (exit)" in done.stderr


def test_an_exception_prints_its_traceback_then_the_report_and_exits_1(leaker, tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(LEAKER + "raise ValueError('boom')\n")
    done = tracepool_cli("run", script)
    assert done.returncode == 1
    traceback, report = done.stderr.split("== tracepool report (exit)")
    assert 'Traceback (most recent call last):\n  File "%s"' % script in traceback
    assert traceback.endswith("ValueError: boom\n")
    assert "runpy" not in traceback and "_cli.py" not in traceback and "_run.py" not in traceback
    # What the failed program still held (its globals) is still held when the report is made.
    assert "at leak (%s:%d)" % (script, line_of(script, "# LEAK")) in report


def test_report_renders_a_saved_report_as_the_run_printed_it(leaker, tmp_path):
    out = tmp_path / "report.json"
    assert tracepool_cli("run", "-o", out, leaker).returncode == 0
    done = tracepool_cli("report", out)
    assert done.returncode == 0, done.stderr
    assert done.stdout == tracepool.render_report(out.read_bytes())
    assert "at leak (%s:%d)" % (leaker, line_of(leaker, "# LEAK")) in done.stdout
    as_json = tracepool_cli("report", "--format", "json", out)
    assert json.loads(as_json.stdout) == json.loads(out.read_text())


def test_top_limits_the_sites_shown(tmp_path):
    script = tmp_path / "many.py"
    script.write_text(
        "import tracepool\n" + "".join("a%d = tracepool.alloc(%d)\n" % (i, 4096 * (i + 1)) for i in range(5))
    )
    done = tracepool_cli("run", "--top", "2", script)
    assert done.returncode == 0, done.stderr
    leaked = section(done.stderr, "Leaked:")
    assert "#2 " in leaked and "#3 " not in leaked
    assert "... 3 more sites holding 24.00 KiB" in leaked


def test_help_explains_every_option_with_examples():
    run = tracepool_cli("run", "--help")
    assert run.returncode == 0
    for option in OPTIONS_OF_RUN:
        assert option in run.stdout
    assert "examples:" in run.stdout and "python -m tracepool run train.py" in run.stdout
    report = tracepool_cli("report", "--help")
    assert report.returncode == 0
    assert "--top" in report.stdout and "--format" in report.stdout and "examples:" in report.stdout
    top = tracepool_cli("--help")
    assert top.returncode == 0 and "run" in top.stdout and "report" in top.stdout


def test_no_arguments_print_help_and_exit_2():
    done = tracepool_cli()
    assert done.returncode == 2
    assert "usage:" in done.stderr


def test_version():
    done = tracepool_cli("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("tracepool ")


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "cannot read"),
        ("not json", "is not a tracepool report (not JSON"),
        ('{"leaks": []}', 'is not a tracepool report (no "schema"'),
        ('{"schema": "tracepool.report/2"}', "has schema tracepool.report/2"),
    ],
)
def test_report_refuses_what_is_not_a_report(tmp_path, content, message):
    path = tmp_path / "x.json"
    if content is not None:
        path.write_text(content)
    done = tracepool_cli("report", path)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.splitlines()) == 1


def _bad_body(change):
    """A valid report with `change` applied to it, as JSON text."""
    site = {"site": 1, "bytes": 1024, "blocks": 1, "peak_bytes": 1024, "total_bytes": 1024, "tags": ["t"],
            "live_at_marks": [1024], "growing": False,
            "frames": [python("leak", "a.py", 3), native("main", "a.c", 9)]}
    report = {"schema": "tracepool.report/1", "reason": "exit", "backend": "host", "time_ns": 1,
              "capture": {"mode": "all", "unwinder": "cfi", "depth": 32, "sample_bytes": 0, "cfi_last_slow": None},
              "stats": {"0": {"allocated_bytes.all.current": 1024}},
              "devices": [{"device": 0, "cached_bytes": 0, "largest_free_block": 0}],
              "leaks": [site], "retained": [dict(site, born_after_mark=None, marks_survived=1)], "cached": [],
              "marks": [{"label": "epoch 0", "time_ns": 1, "live_bytes": 1024}]}
    assert tracepool.render_report(json.dumps(report))  # unchanged, it renders
    change(report)
    return json.dumps(report)


def _set(path, value):
    """A change that sets report[path[0]][path[1]]... to value."""

    def change(report):
        where = report
        for key in path[:-1]:
            where = where[key]
        where[path[-1]] = value

    return change


DEEP = '{"schema": "tracepool.report/1", "leaks": ' + "[" * 100000 + "]" * 100000 + "}"
NOT_A_COUNT = "must be a non-negative integer, not "
FRAME = ["leaks", 0, "frames"]
# name: (a change to a valid report, or the whole text; what the one line says)
BAD_BODIES = {
    "leaks a string": (_set(["leaks"], "x"), 'leaks must be a list, not "x"'),
    "stats null": (_set(["stats"], None), "stats must be an object, not null"),
    "bytes a string": (_set(["leaks", 0, "bytes"], "1024"), 'leaks[0].bytes %s"1024"' % NOT_A_COUNT),
    "negative bytes": (_set(["leaks", 0, "bytes"], -1), "leaks[0].bytes %s-1" % NOT_A_COUNT),
    "bool as bytes": (_set(["leaks", 0, "bytes"], True), "leaks[0].bytes %strue" % NOT_A_COUNT),
    "float blocks": (_set(["leaks", 0, "blocks"], 1.5), "leaks[0].blocks %s1.5" % NOT_A_COUNT),
    "frame not an object": (_set(FRAME + [1], "main"), 'leaks[0].frames[1] must be an object, not "main"'),
    "line a string": (_set(FRAME + [0, "line"], "x"),
                      'leaks[0].frames[0].line must be a non-negative integer or null, not "x"'),
    "file a number": (_set(FRAME + [1, "file"], 7), "leaks[0].frames[1].file must be a string or null, not 7"),
    "marks not a list": (_set(["marks"], {}), "marks must be a list, not an object"),
    "tag a number": (_set(["leaks", 0, "tags"], [3]), "leaks[0].tags[0] must be a string, not 3"),
    "negative mark": (_set(["leaks", 0, "live_at_marks"], [-5]), "leaks[0].live_at_marks[0] %s-5" % NOT_A_COUNT),
    "device missing": (_set(["devices"], [{}]), 'devices[0] has no "device" field'),
    "stat a string": (_set(["stats", "0", "allocated_bytes.all.current"], "1"),
                      'stats["0"]["allocated_bytes.all.current"] %s"1"' % NOT_A_COUNT),
    "capture a list": (_set(["capture"], []), "capture must be an object, not a list"),
    "cfi_last_slow a number": (_set(["capture", "cfi_last_slow"], 1),
                               "capture.cfi_last_slow must be an object or null, not 1"),
    "born_after_mark a number": (_set(["retained", 0, "born_after_mark"], 3),
                                 "retained[0].born_after_mark must be a string or null, not 3"),
    "oom message a number": (_set(["oom"], {"device": 0, "requested_bytes": 1, "message": 5}),
                             "oom.message must be a string, not 5"),
    "no leaks": (lambda r: r.pop("leaks"), 'the report has no "leaks" field'),
    "deep unknown field": (_set(["x"], json.loads("[" * 200 + "]" * 200)), "is nested more than 64 levels deep"),
    "deep nesting": (DEEP, "nested too deeply"),
}


@pytest.mark.parametrize("name", list(BAD_BODIES))
def test_report_refuses_a_bad_body_in_one_line_naming_its_json_path(tmp_path, name):
    body, message = BAD_BODIES[name]
    path = tmp_path / "r.json"
    path.write_text(body if isinstance(body, str) else _bad_body(body))
    done = tracepool_cli("report", path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("tracepool: report: %s" % path), line
    assert message in line, line


def test_report_renders_real_reports_of_every_kind(tmp_path):
    """Reports tracepool itself wrote (live sites, retained blocks, marks, cached memory, an
    out-of-memory error, Python and native frames) pass the check and render as run renders them."""
    program = textwrap.dedent("""
        import ctypes, sys, tracepool
        kept = []
        with tracepool.tag("t"):
            for i in range(3):
                kept.append(tracepool.alloc(1 << 20))
                tracepool.free(tracepool.alloc(3 << 20))
                tracepool.mark("epoch %d" % i)
        tracepool.write_report(sys.argv[1] + "/demand.json")
        try:
            tracepool.alloc(1 << 40)
        except tracepool.OutOfMemoryError:
            pass
        lib = ctypes.CDLL(tracepool.library_path())
        lib.tracepool_default.restype = ctypes.c_void_p
        lib.tracepool_write_oom_report.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
        assert lib.tracepool_write_oom_report(lib.tracepool_default(), (sys.argv[1] + "/oom.json").encode(), None) == 0
        """)
    for capture in ("native", "all", "hybrid"):
        env = dict(os.environ, TRACEPOOL_CONF="backend:host,oom_report:off,host_capacity:64MiB,capture:" + capture)
        done = subprocess.run([sys.executable, "-c", program, str(tmp_path)], env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        for name in ("demand.json", "oom.json"):
            path = tmp_path / name
            rendered = tracepool_cli("report", path)
            assert rendered.returncode == 0, (capture, name, rendered.stderr)
            assert rendered.stdout == tracepool.render_report(path.read_bytes())
        assert "Out of memory: " in tracepool_cli("report", tmp_path / "oom.json").stdout


def test_output_to_dev_stderr_writes_the_report_there(leaker):
    done = tracepool_cli("run", "-o", "/dev/stderr", leaker)
    assert done.returncode == 0, done.stderr
    assert "at leak (%s:%d)" % (leaker, line_of(leaker, "# LEAK")) in section(done.stderr, "Leaked:")
    assert os.path.islink("/dev/stderr")


@pytest.mark.parametrize("where", ["missing/dir/r.json", "a_directory"])
def test_output_that_cannot_be_written_is_one_line_and_a_nonzero_status(tmp_path, where):
    script = tmp_path / "quiet.py"
    script.write_text("import tracepool\nkept = tracepool.alloc(4096)\n")
    (tmp_path / "a_directory").mkdir()
    before = sorted(os.listdir(tmp_path))
    done = tracepool_cli("run", "-o", tmp_path / where, script)
    assert done.returncode == 2, "refused before the program starts"
    assert "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("tracepool: run: -o: ") and str(tmp_path / where) in line, line
    assert sorted(os.listdir(tmp_path)) == before, "nothing left beside the report's path"


def test_output_never_follows_a_link_planted_at_the_old_temporary_name(tmp_path):
    """The command line used to write "<output>.tmp<pid>" and rename it: a link planted there (the
    program runs in the same process, so it knows the pid) redirected the write to its target."""
    out, victim = tmp_path / "r.json", tmp_path / "victim"
    victim.write_text("keep me")
    script = tmp_path / "plant.py"
    script.write_text("import os\nos.symlink(%r, %r + '.tmp%%d' %% os.getpid())\n" % (str(victim), str(out)))
    done = tracepool_cli("run", "-o", out, script)
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "keep me"
    assert json.loads(out.read_text())["schema"] == "tracepool.report/1"


def test_run_refuses_a_missing_script_or_module_and_a_bad_conf(leaker, tmp_path):
    for args in (
        ["run", tmp_path / "missing.py"],
        ["run", "-m", "no_such_module_here"],
        ["run", "--conf", "colour:blue", leaker],
    ):
        done = tracepool_cli(*args, cwd=tmp_path)
        assert done.returncode == 2, args
        # Where PyTorch can use CUDA, a line saying it keeps its own allocator (host backend) may come first.
        assert done.stderr.splitlines()[-1].startswith("tracepool: "), done.stderr
        assert "Traceback" not in done.stderr


def test_run_of_a_directory_says_it_is_one(tmp_path):
    (tmp_path / "adir").mkdir()
    done = tracepool_cli("run", "adir", cwd=tmp_path)
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("tracepool: run: adir is a directory, not a Python file"), line


@pytest.mark.parametrize("command", ["run", "report", "merge", "diff"])
@pytest.mark.parametrize("mistake", [["--no-such-flag"], ["--top", "0"]])
def test_a_mistake_after_a_command_shows_that_commands_usage(command, mistake, tmp_path):
    (tmp_path / "x.json").write_text("{}")
    (tmp_path / "x.py").write_text("")
    files = {"run": ["x.py"], "report": ["x.json"], "merge": ["x.json"], "diff": ["x.json", "x.json"]}[command]
    done = tracepool_cli(command, *mistake, *files, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("usage: python -m tracepool %s " % command), done.stderr
    assert "usage: python -m tracepool [-h]" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1].startswith("python -m tracepool %s: error: " % command), done.stderr
    assert mistake[0] in done.stderr.splitlines()[-1], done.stderr


def test_a_saved_report_renders_as_the_live_one_for_every_capture_mode():
    """The text the library writes, and its rendering of the JSON it writes, for the same state, with
    native, Python and hybrid stacks: they are the same text."""
    program = textwrap.dedent("""
        import tracepool
        kept = [tracepool.alloc(n) for n in (100, 5 << 20)]
        tracepool.free(tracepool.alloc(3 << 20))
        with tracepool.tag("t"):
            for i in range(3):
                kept.append(tracepool.alloc(4096))
                tracepool.mark("epoch %d" % i)
        saved = tracepool.report(format="json", reason="exit", holders=False)  # a search's figures differ each time
        print(tracepool.report(format="text", reason="exit", top=2, holders=False) == tracepool.render_report(saved, top=2))
        """)
    for capture in ("native", "python", "all", "hybrid"):
        env = dict(os.environ, TRACEPOOL_CONF="backend:host,capture:" + capture)
        done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=120)
        assert done.stdout == "True\n", (capture, done.stderr)


def native(function, file=None, line=None, module="/usr/lib/libtorch_cuda.so"):
    return {"kind": "native", "function": function, "file": file, "line": line, "module": module, "address": "0x1"}


def python(function, file, line, borrowed=False):
    return {"kind": "python", "function": function, "file": file, "line": line, "borrowed": borrowed}


def one_site_report(frames):
    site = {
        "site": 1,
        "bytes": 1024,
        "blocks": 1,
        "peak_bytes": 1024,
        "total_bytes": 1024,
        "tags": [],
        "frames": frames,
    }
    return {"schema": "tracepool.report/1", "reason": "exit", "backend": "cuda", "stats": {}, "leaks": [site],
            "cached": [], "marks": []}


def where(frames):
    return section(tracepool.render_report(json.dumps(one_site_report(frames))), "Leaked:").splitlines()[2:]


def test_a_python_site_is_shown_by_its_python_lines_after_the_native_function_that_asked():
    frames = [native("at::empty_cuda"), native("at::matmul")]
    frames += [python("forward", "model.py", 12), native("_PyEval_EvalFrameDefault", module="/usr/bin/python3")]
    frames += [python("step", "train.py", 30), python("<module>", "train.py", 40), python("_run_code", "runpy.py", 88)]
    assert where(frames) == [
        "       in at::empty_cuda (libtorch_cuda.so)",
        "       at forward (model.py:12)",
        "       at step (train.py:30)",
        "       at <module> (train.py:40)",
    ]


def test_at_most_five_python_lines_are_shown_and_the_rest_counted():
    frames = [python("f%d" % i, "deep.py", i) for i in range(1, 9)] + [native("main", "python.c", 15)]
    assert where(frames) == ["       at f%d (deep.py:%d)" % (i, i) for i in range(1, 6)] + [
        "       ... 3 more Python frames"
    ]


def test_borrowed_python_frames_say_so_once():
    frames = [native("torch::autograd::Engine::evaluate_function")]
    frames += [python("step", "train.py", 7, borrowed=True), python("main", "train.py", 9, borrowed=True)]
    assert where(frames)[1:] == [
        "       at step (train.py:7), on the thread that started this work",
        "       at main (train.py:9)",
    ]


def test_native_only_sites_read_as_the_core_renders_them():
    frames = [
        native("alloc", "a.c", 3),
        native("??", module=None),
        native("main", "a.c", 9),
        native("__libc_start_main"),
    ]
    assert where(frames) == ["       at alloc (a.c:3)", "       at 0x1", "       at main (a.c:9)"]
    frames = [native("f%d" % i, "deep.c", i) for i in range(1, 9)]
    assert where(frames) == ["       at f%d (deep.c:%d)" % (i, i) for i in range(1, 6)] + ["       ... 3 more frames"]


def test_an_unnamed_native_function_is_named_by_its_module():
    frames = [native("??", module="/x/_tracepool.so"), python("f", "a.py", 1)]
    assert where(frames)[0] == "       in _tracepool.so"


def test_demo_names_its_growing_lines_and_shows_its_activations_as_cached(tmp_path):
    out = tmp_path / "demo.json"
    done = tracepool_cli("run", "--no-torch", "-o", out, DEMO)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    outputs_line = line_of(DEMO, "val_outputs.append(model(")
    loss_line = line_of(DEMO, "loss = model(random_batch(")
    activations_line = line_of(DEMO, "hidden = (x @ self.w1).relu()")

    [outputs] = site_at(report["leaks"], DEMO, outputs_line)
    assert outputs["growing"] and outputs["tags"] == ["validation"] and outputs["bytes"] == 18 << 20
    [loss] = site_at(report["leaks"], DEMO, loss_line)
    assert loss["growing"] and loss["tags"] == ["train"] and loss["blocks"] == 24
    assert [s for s in report["leaks"] if s["growing"]] == [outputs, loss]
    # The stand-in tensors show their memory as CuPy's arrays do (__cuda_array_interface__, an attribute of each
    # object): the lists that keep them are named, each holding all of its site's bytes.
    assert [(h["holder"], h["bytes"], h["blocks"]) for h in outputs["held_by"]] == [
        ("list `val_outputs` (global in leaky_training.py)", 18 << 20, 9)]
    assert [(h["holder"], h["bytes"], h["blocks"]) for h in loss["held_by"]] == [
        ("list `losses` (global in leaky_training.py)", loss["bytes"], 24)]
    assert site_at(report["cached"], DEMO, activations_line)
    assert not site_at(report["leaks"], DEMO, activations_line)

    text = tracepool_cli("report", out).stdout
    leaked, cached = section(text, "Leaked:"), section(text, "Cached:")
    for line in (outputs_line, loss_line):
        assert "leaky_training.py:%d)" % line in leaked
    assert leaked.count("GROWING") == 2
    assert "leaky_training.py:%d)" % activations_line in cached

    # The stand-in tensors are a library's code (tracepool.shape_only), as PyTorch's are: each site leads with the
    # demo's own first line, in the titles (which merge, diff and the page show), the text and its Retained section.
    output_line = line_of(DEMO, "return hidden @ self.w2")
    assert outputs["title"].startswith("TinyModel.__call__ (leaky_training.py:%d) \u2190 validate (:%d)" % (output_line, outputs_line))
    assert loss["title"].startswith("train_step (leaky_training.py:%d)" % loss_line)
    assert outputs["title"].endswith("\u00b7 via ShapeOnlyTensor.__init__ (shape_only.py:%d)" % line_of(
        REPO / "bindings" / "python" / "tracepool" / "shape_only.py", "self.ptr = tracepool.alloc(nbytes)"))
    entry = leaked.split("#1 ")[1].splitlines()
    assert entry[1].strip().startswith("in ShapeOnlyTensor.__init__ (shape_only.py:"), entry
    assert entry[2].strip().startswith("at TinyModel.__call__ (") and entry[2].endswith("leaky_training.py:%d)" % output_line), entry
    retained = section(text, "Retained:")
    # One entry a site, with its three parts: born before the first mark and after each of the next two.
    assert retained.count("at " + outputs["title"]) == 1 and retained.count("at " + loss["title"]) == 1, retained
    assert "6.00 MiB born before the first mark (alive through 3), 6.00 MiB born after 'epoch 1' (alive through 2), " \
           "6.00 MiB born after 'epoch 2' (alive through 1)" in retained, retained
