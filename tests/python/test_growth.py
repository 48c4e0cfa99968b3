"""Growth found without marks, and who holds it, on the host backend: an unchanged program (no
tracepool.mark, no tracepool import but its device arrays' own) run under `python -m tracepool run`
comes out with its leaks flagged GROWING at their lines and named holders, and with nothing else
flagged (Note [Growth without marks] in core/trace/tracer.h)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The programs' arrays: tracepool memory shown as CuPy's arrays show theirs (the CUDA Array Interface).
DEVICE_ARRAY = """\
import time
import tracepool

class DeviceArray:
    def __init__(self, nbytes):
        self.ptr = tracepool.alloc(nbytes)
        self.nbytes = nbytes
    @property
    def __cuda_array_interface__(self):
        return {"data": (self.ptr, False), "shape": (self.nbytes,), "typestr": "|u1", "version": 3}
    def __del__(self):
        tracepool.free(self.ptr)
"""


# Device arrays as CuPy's and Numba's expose theirs (__cuda_array_interface__), over tracepool's
# memory. Each step: 70 temporaries made and freed (churn), one array kept in a list, one in a
# closure every other step, one in a dict every third; a model built once and optimizer state made
# at the first step stay flat. No marks: the library samples as allocations go by.
PROGRAM = DEVICE_ARRAY + """\

def make_hook():
    cache = []
    def remember(x):
        cache.append(x)
    return remember

weights = DeviceArray(8 << 20)  # model
kept = []
memo = {}
remember = make_hook()
for step in range(60):
    if step == 0:
        state = DeviceArray(16 << 20)  # optimizer
    for _ in range(70):
        DeviceArray(1 << 20)  # churn
    kept.append(DeviceArray(4096))  # list
    if step % 2 == 0:
        remember(DeviceArray(8192))  # closure
    if step % 3 == 0:
        memo[step] = DeviceArray(2048)  # dict
    time.sleep(0.008)
"""


def line_of(path, marker):
    return [i for i, text in enumerate(Path(path).read_text().splitlines(), 1) if text.endswith("# " + marker)][0]


def program_line(site, path):
    """The line of the site's outermost frame in the program (its <module> line)."""
    lines = [f["line"] for f in site["frames"]
             if f["kind"] == "python" and os.path.realpath(f["file"] or "?") == os.path.realpath(path)]
    return lines[-1] if lines else None


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    work = tmp_path_factory.mktemp("growth")
    program = work / "train.py"
    program.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "TRACEPOOL_REPORT")}
    env["TRACEPOOL_CONF"] = "backend:host,auto_mark_ms:2"  # a test's run is short: marks closer together
    done = subprocess.run([sys.executable, "-m", "tracepool", "run", "--no-torch", "-o", work / "r.json", program],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads((work / "r.json").read_text())
    sites = {}
    for site in data["leaks"]:
        sites.setdefault(program_line(site, program), []).append(site)
    return data, sites, program


def only_site(report, marker):
    data, sites, program = report
    found = sites.get(line_of(program, marker), [])
    assert len(found) == 1, (marker, [program_line(s, program) for s in data["leaks"]])
    return found[0]


def test_growth_is_told_from_automatic_marks_when_the_program_made_none(report):
    data, _, _ = report
    assert data["marks_made"] == 0
    assert data["growth_basis"] == "automatic marks"
    assert data["auto_marks_made"] >= 32
    assert {m["label"] for m in data["auto_marks"]} == {"sample"}


@pytest.mark.parametrize("marker, holder, example", [
    ("list", "list `kept` (global in train.py)", "kept["),
    ("closure", "a closure of `make_hook.<locals>.remember` (cell `cache`", "remember."),
    ("dict", "dict `memo` (global in train.py)", "memo["),
])
def test_each_leak_is_flagged_growing_and_its_holder_named(report, marker, holder, example):
    site = only_site(report, marker)
    assert site["growing"], site["growth_floors"]
    assert site["growth_floors"][-1] > site["growth_floors"][0]
    assert len(site["held_by"]) == 1, site["held_by"]
    held = site["held_by"][0]
    assert held["holder"].startswith(holder), held
    assert held["example"].startswith(example), held
    assert (held["bytes"], held["blocks"]) == (site["bytes"], site["blocks"])


@pytest.mark.parametrize("marker, name", [("model", "weights"), ("optimizer", "state")])
def test_memory_built_once_or_at_the_first_step_is_not_growing(report, marker, name):
    site = only_site(report, marker)
    assert not site["growing"], site["growth_floors"]
    assert site["held_by"][0]["holder"] == "global `%s` in train.py" % name


def test_churn_is_not_growing_and_nothing_else_is(report):
    data, sites, program = report
    assert line_of(program, "churn") not in sites or not any(s["growing"] for s in sites[line_of(program, "churn")])
    growing = sorted(program_line(s, program) for s in data["leaks"] if s["growing"])
    assert growing == sorted(line_of(program, m) for m in ("list", "closure", "dict"))


def test_the_text_report_says_growing_without_marks_and_who_holds_it(report, tmp_path):
    data, _, _ = report
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    text = subprocess.run([sys.executable, "-m", "tracepool", "report", path], capture_output=True, text=True,
                          timeout=60).stdout
    assert "GROWING without marks" in text
    assert "held by list `kept` (global in train.py): 240.00 KiB in 60 blocks, e.g. kept[" in text
    assert "Growth told without marks: from" in text
    assert "Holders: " in text


def test_holders_can_be_left_out(tmp_path):
    program = tmp_path / "p.py"
    program.write_text("import tracepool\nkept = [tracepool.alloc(4096)]\n")
    env = dict(os.environ, TRACEPOOL_CONF="backend:host")
    done = subprocess.run([sys.executable, "-m", "tracepool", "run", "--no-torch", "--no-holders", "-o",
                           tmp_path / "r.json", program], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["holder_search"] is None
    assert all(not s["held_by"] for s in data["leaks"])


def test_a_run_too_short_to_tell_growth_says_how_to_make_it_tell(tmp_path):
    """Issue 35: when the automatic marks are too few and the program made none, the text says what to do, and
    doing it (three marks) makes the growing line known."""
    program = tmp_path / "p.py"
    env = dict(os.environ, TRACEPOOL_CONF="backend:host")
    for marks in (False, True):
        program.write_text("import tracepool\nkept = []\nfor epoch in range(3):\n"
                           "    kept.append(tracepool.alloc(1 << 20))\n" + ("    tracepool.mark('epoch')\n" if marks else ""))
        done = subprocess.run([sys.executable, "-m", "tracepool", "run", "--no-torch", program], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        hint = 'To tell in a short run, mark each epoch (tracepool.mark("epoch"), tracepool_mark in C)'
        if marks:
            assert hint not in done.stderr and "GROWING across marks" in done.stderr, done.stderr
        else:
            assert hint in done.stderr and "GROWING" not in done.stderr, done.stderr


# Issue 35's short run: three epochs in about 3 seconds, each churning temporaries over 40 steps and then keeping
# its validation outputs in a global list. Nothing marks (Note [Growth without marks], Note [Growth in short
# runs] in core/report/growth.h).
THREE_EPOCHS = DEVICE_ARRAY + """\

weights = DeviceArray(8 << 20)  # model
outputs = []
for epoch in range(3):
    for step in range(40):
        if epoch == 0 and step == 0:
            state = DeviceArray(16 << 20)  # optimizer
        for _ in range(70):
            DeviceArray(1 << 20)  # churn
        time.sleep(0.02)
    for batch in range(5):
        outputs.append(DeviceArray(256 << 10))  # outputs
        time.sleep(0.02)
"""


# The default spacing, and the one that gives the same run fewer than 32 marks (eight windows, clean steps).
@pytest.fixture(scope="module", params=["backend:host", "backend:host,auto_mark_ms:60"])
def three_epochs(request, tmp_path_factory):
    work = tmp_path_factory.mktemp("epochs")
    program = work / "train.py"
    program.write_text(THREE_EPOCHS)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "TRACEPOOL_REPORT")}
    env["TRACEPOOL_CONF"] = request.param
    done = subprocess.run([sys.executable, "-m", "tracepool", "run", "--no-torch", "-o", work / "r.json", program],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads((work / "r.json").read_text())
    sites = {}
    for site in data["leaks"]:
        sites.setdefault(program_line(site, program), []).append(site)
    return data, sites, program


def test_a_3_second_unmarked_run_that_keeps_outputs_each_epoch_is_flagged_with_its_holder(three_epochs):
    data, sites, program = three_epochs
    told = "%d automatic marks kept, spacing %s ms" % (len(data["auto_marks"]), data["auto_mark_ms"])
    assert data["marks_made"] == 0
    assert data["growth_basis"] == "automatic marks", told
    site = only_site(three_epochs, "outputs")
    assert site["growing"], (told, site["growth_floors"], site["live_at_auto_marks"])
    assert len(site["held_by"]) == 1, site["held_by"]
    assert site["held_by"][0]["holder"].startswith("list `outputs` (global in train.py)"), site["held_by"]
    assert (site["held_by"][0]["bytes"], site["blocks"]) == (site["bytes"], 15)
    for marker in ("model", "optimizer"):
        assert not only_site(three_epochs, marker)["growing"], (marker, told)
    assert not any(s["growing"] for s in sites.get(line_of(program, "churn"), [])), told
    growing = [program_line(s, program) for s in data["leaks"] if s["growing"]]
    assert growing == [line_of(program, "outputs")], told
