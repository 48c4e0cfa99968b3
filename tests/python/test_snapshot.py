"""tracepool.torch.dump_snapshot: tracepool's memory as a torch.cuda.memory._snapshot() pickle.

Runs without a GPU and without torch (TRACEPOOL_CONF=backend:host in CI): blocks come from
tracepool.alloc. What PyTorch's readers need is checked twice: by torch.cuda._memory_viz itself
where torch is installed, and always by viewer_problems() below, written from _memory_viz.py
(segsum, trace, trace_plot, segment_plot) and MemoryViz.js (the browser viewer's unpickle,
annotate_snapshot, process_alloc_data).
"""

import collections
import importlib.util
import json
import os
import pickle
import pickletools

import pytest

import tracepool
import tracepool.torch  # must import without torch
from tracepool.torch import memory_viz

HAVE_TORCH = importlib.util.find_spec("torch") is not None
STATES = {"active_allocated", "active_pending_free", "inactive"}
HERE = os.path.realpath(__file__)


def viewer_problems(data):
    """What in `data` PyTorch's snapshot readers would trip on, as a list of strings."""
    problems = []

    def plain(x, where):
        if type(x) is dict:
            for k, v in x.items():
                if not isinstance(k, str):
                    problems.append("%s: key %r is not a str" % (where, k))
                plain(v, "%s.%s" % (where, k))
        elif type(x) in (list, tuple):
            for i, v in enumerate(x):
                plain(v, "%s[%d]" % (where, i))
        elif type(x) not in (str, int, float, bool, type(None)):
            problems.append("%s: %s is not a plain type" % (where, type(x).__name__))

    plain(data, "snapshot")
    if type(data) is not dict or not {"segments", "device_traces"} <= set(data):
        return problems + ["not a dict with segments and device_traces"]

    def frames_ok(frames, where):
        if not isinstance(frames, list):
            problems.append("%s: frames is not a list" % where)
            return
        for f in frames:  # _frame_fmt and format_frames: f["filename"], f["line"], f["name"]
            if not (isinstance(f.get("filename"), str) and isinstance(f.get("line"), int)
                    and isinstance(f.get("name"), str)):
                problems.append("%s: frame %r lacks filename/line/name" % (where, f))

    active = {}
    for i, seg in enumerate(data["segments"]):
        where = "segments[%d]" % i
        for key in ("device", "address", "total_size", "allocated_size", "stream"):
            if not isinstance(seg.get(key), int):
                problems.append("%s.%s is not an int" % (where, key))
        if not isinstance(seg.get("segment_pool_id"), tuple):
            problems.append("%s.segment_pool_id is not a tuple" % where)
        frames_ok(seg.get("frames", []), where)
        offset = 0
        for j, b in enumerate(seg.get("blocks", [])):
            bw = "%s.blocks[%d]" % (where, j)
            if b.get("state") not in STATES:
                problems.append("%s: state %r" % (bw, b.get("state")))
            if not (isinstance(b.get("size"), int) and isinstance(b.get("requested_size"), int)):
                problems.append("%s: size/requested_size not ints" % bw)
                continue
            # The viewer recomputes each block's address as the segment's plus the sizes before it.
            if b.get("address") != seg["address"] + offset:
                problems.append("%s: address is not segment address + preceding sizes" % bw)
            if b["state"] == "active_allocated":
                if b["requested_size"] > b["size"]:
                    problems.append("%s: requested_size > size" % bw)
                active.setdefault(seg["device"], set()).add(b["address"])
            frames_ok(b.get("frames", []), bw)
            offset += b["size"]
        if offset != seg.get("total_size"):  # segsum asserts that blocks fill their segment
            problems.append("%s: blocks add up to %d, total_size is %s" % (where, offset, seg.get("total_size")))
    traces = data["device_traces"]
    if not isinstance(traces, list) or any(not isinstance(t, list) for t in traces):
        return problems + ["device_traces is not a list of lists"]
    for device in active:
        if device >= len(traces):  # the viewer indexes device_traces by a segment's device
            problems.append("device_traces has no list for device %d" % device)
    for d, trace in enumerate(traces):
        allocs, history = set(), False
        for k, e in enumerate(trace):
            where = "device_traces[%d][%d]" % (d, k)
            if not (isinstance(e.get("action"), str) and all(isinstance(e.get(x), int) for x in ("addr", "size", "stream"))):
                problems.append("%s: needs action, addr, size, stream" % where)
                continue
            frames_ok(e.get("frames", []), where)
            if e["action"] == "alloc":
                allocs.add(e["addr"])
            elif e["action"] == "free_completed":
                allocs.discard(e["addr"])
                history = True
        # Live blocks without an alloc event are drawn as allocated before the trace began: a history
        # may start after them; without one, each live block has its alloc event.
        live = active.get(d, set())
        if not allocs <= live or (not history and allocs != live):
            problems.append("device %d: blocks still allocated by the trace %d, live blocks %d" % (d, len(allocs), len(live)))
    return problems


def opcodes(raw):
    return {op.name for op, _, _ in pickletools.genops(raw)}


@pytest.fixture
def blocks():
    """Live blocks of three size classes plus a freed one; yields the line that allocated the first."""
    line = _line_of("small = tracepool.alloc(1000)")
    small = tracepool.alloc(1000)
    large = tracepool.alloc(3 << 20)
    freed = tracepool.alloc(30 << 20)
    tracepool.free(freed)
    try:
        yield line
    finally:
        tracepool.free(small)
        tracepool.free(large)


def _line_of(text):
    with open(HERE) as f:
        for number, source in enumerate(f, 1):
            if source.strip() == text:
                return number
    raise AssertionError("no line %r in %s" % (text, HERE))


def test_json_becomes_the_dictionary_torch_snapshots_are():
    doc = {"segments": [{"device": 1, "address": "0x7f0000000000", "total_size": 2097152, "allocated_size": 512,
                         "active_size": 512, "requested_size": 100, "stream": 0, "segment_type": "small",
                         "segment_pool_id": [0, 0], "is_expandable": False, "frames": [],
                         "blocks": [{"address": "0x7f0000000000", "size": 512, "requested_size": 100,
                                     "state": "active_allocated",
                                     "frames": [{"filename": "train.py", "line": 7, "name": "step"},
                                                {"filename": None, "line": None, "name": "0x1234"}]},
                                    {"address": 139637976727552 + 512, "size": 2097152 - 512, "requested_size": 0,
                                     "state": "inactive", "frames": []}]}],
           "device_traces": [[]], "allocator_settings": {}, "external_annotations": []}
    data = memory_viz.from_json(json.dumps(doc))
    seg = data["segments"][0]
    assert seg["address"] == 0x7F0000000000 and seg["segment_pool_id"] == (0, 0)
    assert seg["blocks"][0]["frames"] == [{"filename": "train.py", "line": 7, "name": "step"},
                                          {"filename": "??", "line": 0, "name": "0x1234"}]
    assert len(data["device_traces"]) == 2  # one list per device up to the highest with a segment
    assert memory_viz.without_traces(data)["device_traces"] == [[], []]


def test_snapshot_names_the_allocating_line(blocks):
    data = memory_viz.from_json(tracepool._tracepool.torch_snapshot_json())
    assert viewer_problems(data) == []
    live = [b for s in data["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    small = [b for b in live if b["requested_size"] == 1000]
    assert small, "no live 1000-byte block in %r" % live
    assert any(os.path.realpath(f["filename"]) == HERE and f["line"] == blocks for b in small for f in b["frames"]), \
        [b["frames"] for b in small]


def test_dump_snapshot_writes_protocol_4_with_the_viewers_opcodes_only(blocks, tmp_path):
    path = tmp_path / "snapshot.pickle"
    tracepool.torch.dump_snapshot(path)
    raw = path.read_bytes()
    assert raw[:2] == b"\x80\x04"
    assert opcodes(raw) <= memory_viz.VIEWER_OPCODES, opcodes(raw) - memory_viz.VIEWER_OPCODES
    data = pickle.loads(raw)
    assert data == memory_viz.from_json(tracepool._tracepool.torch_snapshot_json())
    assert viewer_problems(data) == []
    assert sorted(os.listdir(tmp_path)) == ["snapshot.pickle"]  # no temporary file left behind


def test_dump_snapshot_never_follows_a_link_planted_at_the_old_temporary_name(blocks, tmp_path):
    """It used to write "<path>.tmp<pid>" and rename it: a link planted there redirected the pickle."""
    path, victim = tmp_path / "snapshot.pickle", tmp_path / "victim"
    victim.write_text("keep me")
    planted = tmp_path / ("snapshot.pickle.tmp%d" % os.getpid())
    planted.symlink_to(victim)
    tracepool.torch.dump_snapshot(path)
    assert victim.read_text() == "keep me"
    assert planted.is_symlink()
    assert pickle.loads(path.read_bytes())["segments"]


def test_dump_snapshot_refuses_a_directory_with_a_tracepool_error(tmp_path):
    with pytest.raises(tracepool.InvalidArgumentError, match="is a directory"):
        tracepool.torch.dump_snapshot(tmp_path)
    assert os.listdir(tmp_path) == []


def test_checker_catches_what_the_viewer_rejects():
    seg = {"device": 0, "address": 4096, "total_size": 2048, "allocated_size": 0, "stream": 0,
           "segment_pool_id": (0, 0), "frames": [],
           "blocks": [{"address": 4096, "size": 1024, "requested_size": 0, "state": "inactive", "frames": []}]}
    assert viewer_problems({"segments": [seg], "device_traces": []}) == [
        "segments[0]: blocks add up to 1024, total_size is 2048"]
    live = dict(seg, blocks=[dict(seg["blocks"][0], state="active_allocated", size=2048)])
    assert viewer_problems({"segments": [live], "device_traces": []}) == ["device_traces has no list for device 0"]
    ordered = collections.OrderedDict(segments=[], device_traces=[])  # pickles with opcodes the viewer lacks
    assert viewer_problems(ordered)[0] == "snapshot: OrderedDict is not a plain type"


@pytest.mark.skipif(not HAVE_TORCH, reason="torch not installed: viewer_problems() stands in for _memory_viz")
def test_torch_memory_viz_reads_it(blocks, tmp_path):
    from torch.cuda import _memory_viz

    path = tmp_path / "snapshot.pickle"
    tracepool.torch.dump_snapshot(path)
    with open(path, "rb") as f:
        data = pickle.load(f)
    assert "total_reserved" in _memory_viz.segsum(data)
    assert "entries" in _memory_viz.trace(data)
    assert "MemoryViz.js" in _memory_viz.trace_plot(data)
    assert "MemoryViz.js" in _memory_viz.segment_plot(data)
    # The flamegraph views, with the flamegraph script (a download) replaced by the identity.
    assert "active_allocated" in _memory_viz.segments(data, format_flamegraph=lambda lines: lines)
    assert "active_allocated" in _memory_viz.memory(data, format_flamegraph=lambda lines: lines)


@pytest.fixture
def torch_history():
    """PyTorch's history calls (tracepool.torch.memory_history) as torch.cuda.memory makes them; put
    back as they were (never called, history off) afterwards."""
    from tracepool.torch import memory_history

    try:
        yield memory_history
    finally:
        memory_history.record(None)
        memory_history._settings = None


def _entries_at(data, address, size=None):
    return [e for e in data["device_traces"][0] if e.get("addr") == address and size in (None, e.get("size"))
            and not e["action"].startswith("segment_")]


def test_record_memory_history_drives_tracepools_history_and_honours_its_arguments(torch_history):
    snapshot = tracepool.torch._memory_snapshot  # torch._C._cuda_memorySnapshot, as install() points it
    torch_history.record("all", context="all", stacks="all", max_entries=1000)
    assert torch_history.enabled()
    line = _line_of("first = tracepool.alloc(4096)")
    first = tracepool.alloc(4096)
    tracepool.free(first)
    data = snapshot(None)
    assert viewer_problems(data) == []
    actions = [e["action"] for e in _entries_at(data, first)]
    assert actions == ["alloc", "free_requested", "free_completed"], actions
    alloc = _entries_at(data, first)[0]
    assert any(os.path.realpath(f["filename"]) == HERE and f["line"] == line for f in alloc["frames"])
    assert all(e["frames"] for e in _entries_at(data, first)), "context='all': frees carry their stack too"

    # context="alloc", stacks="python", clear_history: a fresh history, frames on allocations only, Python only.
    torch_history.record("all", context="alloc", stacks="python", max_entries=1000, clear_history=True)
    second = tracepool.alloc(8192)
    tracepool.free(second)
    data = snapshot(None)
    assert _entries_at(data, first, 4096) == [], "clear_history forgot the earlier events"
    alloc, requested, completed = _entries_at(data, second, 8192)
    assert alloc["frames"] and all(f["filename"].endswith(".py") for f in alloc["frames"])
    assert requested["frames"] == [] and completed["frames"] == []

    # max_entries: the newest events only.
    torch_history.record("all", context="all", stacks="all", max_entries=2, clear_history=True)
    for _ in range(3):
        tracepool.free(tracepool.alloc(4096))
    assert len(snapshot(None)["device_traces"][0]) == 3  # the newest two events; a free counts as two entries

    # enabled="state": no history of events; the live blocks keep their frames unless context=None.
    kept = tracepool.alloc(1000)
    try:
        torch_history.record("state", context="state", stacks="all")
        data = snapshot(None)
        assert data["device_traces"] == [[] for _ in data["device_traces"]]
        live = [b for s in data["segments"] for b in s["blocks"] if b["address"] == kept]
        assert live and live[0]["frames"], "context='state' keeps the live blocks' stacks"
        torch_history.record("all", context=None)
        data = snapshot(None)
        live = [b for s in data["segments"] for b in s["blocks"] if b["address"] == kept]
        assert live[0]["frames"] == [], "context=None: no stacks"
    finally:
        tracepool.free(kept)

    torch_history.record(None)
    assert not torch_history.enabled()
    tracepool.free(tracepool.alloc(4096))
    assert all(t == [] for t in snapshot(None)["device_traces"]), "None stops recording and forgets"


def test_each_event_keeps_the_context_it_was_recorded_under(torch_history):
    """PyTorch's test_memory_plots_free_stack and _history_context: context="all" gives a free the stack
    that freed it; "alloc" only allocations; a call with context=None in between leaves the events
    recorded meanwhile without stacks, whatever later calls ask."""
    snapshot = tracepool.torch._memory_snapshot

    def the_alloc():
        return tracepool.alloc(4096)

    def the_free(block):
        tracepool.free(block)

    for context in ("all", "alloc", "state"):
        torch_history.record("all", context=context, stacks="python", clear_history=True)
        the_free(the_alloc())
        text = json.dumps(snapshot(None))
        assert ("the_free" in text) == (context == "all"), context
        assert ("the_alloc" in text) == (context != "state"), context

    def should_capture1():
        return tracepool.alloc(4096)

    def should_not_capture():
        return tracepool.alloc(4096)

    torch_history.record("all", context="all", stacks="python", clear_history=True)
    first = should_capture1()
    torch_history.record("all", context=None)
    second = should_not_capture()
    torch_history.record("all", context="all", stacks="python")
    tracepool.free(first)
    tracepool.free(second)
    text = json.dumps(snapshot(None))
    assert "should_capture1" in text
    assert "should_not_capture" not in text, "recorded under context=None"
    assert "test_each_event_keeps_the_context" in text, "the frees, recorded under context='all', name this test"


def test_events_carry_their_devices_metadata_and_compiled_region(torch_history):
    """PyTorch's test_memory_plots_metadata and test_memory_compile_regions: an event carries the
    user_metadata and the compile_context its device had when it was recorded, through the calls
    tracepool's allocator class makes for _set_memory_metadata and PyTorch's compiled-region callbacks;
    and with the class installed, PyTorch's own _record_memory_history runs first with every argument
    (it sets those callbacks up)."""
    from tracepool import _tracepool

    calls = []
    torch_history.use_pytorch_function(lambda *args: calls.append(args))
    try:
        _tracepool.history_set_metadata(0, "metadata test")
        torch_history.record("all", "all", "python", 100, True, True, False, ["segment_alloc"])
        _tracepool.history_push_context(0, "Torch-Compiled Region: 0/0")
        block = tracepool.alloc(4096)
        _tracepool.history_pop_context(0)
        assert _tracepool.history_metadata(0) == "metadata test"
        _tracepool.history_set_metadata(0, "")
        tracepool.free(block)
    finally:
        torch_history.use_pytorch_function(None)
        _tracepool.history_set_metadata(0, "")
    assert calls == [("all", "all", "python", 100, True, True, False, ["segment_alloc"])]
    entries = _entries_at(tracepool.torch._memory_snapshot(None), block)
    assert [(e["action"], e["user_metadata"], e["compile_context"]) for e in entries] == [
        ("alloc", "metadata test", "Torch-Compiled Region: 0/0"), ("free_requested", "", "N/A"),
        ("free_completed", "", "N/A")]
    with pytest.raises(tracepool.Error, match="device"):
        _tracepool.history_set_metadata(1 << 20, "x")


def test_a_segment_given_back_names_the_empty_cache_that_released_it_under_context_all(torch_history):
    """PyTorch's test_memory_plots_free_segment_stack: with context="all" a segment_free carries the
    stack of the empty_cache that gave it back; with "alloc" and "state" no event names it."""
    def release_it():
        tracepool.empty_cache()

    for context in ("alloc", "all", "state"):
        tracepool.empty_cache()
        torch_history.record("all", context=context, stacks="python", clear_history=True)
        tracepool.free(tracepool.alloc(3 << 20))
        release_it()
        traces = tracepool.torch._memory_snapshot(None)["device_traces"][0]
        assert "segment_free" in {e["action"] for e in traces}, context
        assert ("release_it" in json.dumps(traces)) == (context == "all"), context


def test_the_legacy_form_and_bad_arguments(torch_history):
    torch_history.record_legacy(True, record_context=True, trace_alloc_max_entries=10,
                                trace_alloc_record_context=True, record_context_cpp=False)
    assert torch_history.enabled()
    block = tracepool.alloc(4096)
    tracepool.free(block)
    entries = _entries_at(tracepool.torch._memory_snapshot(None), block)
    assert [e["action"] for e in entries] == ["alloc", "free_requested", "free_completed"]
    assert all(f["filename"].endswith(".py") for e in entries for f in e["frames"]), "record_context_cpp=False"
    torch_history.record_legacy(False)
    assert not torch_history.enabled()
    # skip_actions, PyTorch's eighth argument: those kinds of events are left out.
    torch_history.record("all", "all", "python", 100, True, False, False, ["free_requested", "segment_alloc"])
    tracepool.free(tracepool.alloc(4096))
    actions = {e["action"] for e in tracepool.torch._memory_snapshot(None)["device_traces"][0]}
    assert actions == {"alloc", "free_completed"}, actions
    for bad in ({"enabled": "some"}, {"context": "everything"}, {"stacks": "cpp"}):
        with pytest.raises(RuntimeError, match="_record_memory_history"):
            torch_history.record(**bad)
