"""Who holds it (tracepool/_holders.py): each test keeps fake device arrays alive one way and checks that
the search names that way. Host only: the arrays are objects with __cuda_array_interface__ (or a real
DLPack capsule) over made-up addresses, which nothing ever reads.

The module is loaded from its folder (holders_support.py), so these tests run against the source tree
without the extension.
"""

import ctypes
import gc
import itertools
import sys
import threading
import time
import types
import weakref

import pytest

from holders_support import FakeArray, load_holders

holders = load_holders()

BLOCK = 4096
_ranges = itertools.count()


class BrokenArray:
    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("device lost")


class BrokenDLPack:
    def __dlpack__(self, stream=None):
        raise BufferError("cannot export")


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
DLTENSOR = b"dltensor"  # a capsule keeps a pointer to its name: this constant outlives every capsule


class DLPackArray:
    """An array that only speaks DLPack: each __dlpack__ returns a real "dltensor" capsule (no deleter)."""

    def __init__(self, address, byte_offset):
        self.shape = (ctypes.c_int64 * 1)(BLOCK - byte_offset)
        self.managed = _DLManagedTensor(data=address, device_type=2, ndim=1, code=1, bits=8, lanes=1,
                                        shape=ctypes.addressof(self.shape), byte_offset=byte_offset)

    def __dlpack__(self, stream=None):
        return _capsule_new(ctypes.addressof(self.managed), DLTENSOR, None)


def addresses(n):
    """n block addresses no other test uses, so that arrays left over from one test never match another's."""
    base = 0x7F0000000000 + next(_ranges) * 0x100000000
    return [base + i * BLOCK for i in range(n)]


def blocks_of(addrs, key="site-A"):
    return [(a, BLOCK, key) for a in addrs]


def only_holder(found, key="site-A"):
    entries = found["held_by"][key]
    assert len(entries) == 1, entries
    return entries[0]


def make_hook(arrays):
    cache = list(arrays)

    def hook():
        return cache

    return hook


class Trainer:
    def __init__(self, buffers):
        self.buffers = buffers


def test_global_list_of_the_program_is_named_with_its_file():
    addrs = addresses(10)
    program = {"kept": [FakeArray(a) for a in addrs]}
    found = holders.find_holders(blocks_of(addrs), program_globals=program, program_name="train.py")
    entry = only_holder(found)
    assert entry["holder"] == "list `kept` (global in train.py)"
    assert (entry["blocks"], entry["bytes"]) == (10, 10 * BLOCK)
    assert entry["example"] == "kept[0]"
    assert found["complete"] and found["note"] is None
    assert found["exposing"] == 10


class InstanceArray:
    """A device array whose __cuda_array_interface__ is an attribute of the object, not of its type (the CUDA
    Array Interface allows both); without an address, an object of the type that has none."""

    def __init__(self, address=None):
        if address is not None:
            self.__cuda_array_interface__ = {"data": (address, False), "shape": (BLOCK,), "typestr": "|u1", "version": 3}

    def __getattr__(self, name):  # the search must not run the program's code to find the interface
        raise AssertionError("__getattr__(%r) called" % name)

    def __getattribute__(self, name):
        if name == "__cuda_array_interface__":
            raise AssertionError("__getattribute__ called")
        return object.__getattribute__(self, name)


def test_an_object_that_carries_the_interface_itself_is_found():
    addrs = addresses(3)
    program = {"val_outputs": [InstanceArray(a) for a in addrs], "empty": InstanceArray()}
    found = holders.find_holders(blocks_of(addrs), program_globals=program, program_name="demo.py")
    entry = only_holder(found)
    assert entry["holder"] == "list `val_outputs` (global in demo.py)"
    assert (entry["blocks"], found["exposing"]) == (3, 3)


def test_closure_cell_is_named_with_the_function_and_the_cell():
    addrs = addresses(4)
    program = {"h": make_hook(FakeArray(a) for a in addrs)}
    entry = only_holder(holders.find_holders(blocks_of(addrs), program, "train.py"))
    assert entry["holder"] == "a closure of `make_hook.<locals>.hook` (cell `cache`, global `h` in train.py)"
    assert entry["example"] == "h.__closure__[0].cell_contents[0]"
    assert entry["blocks"] == 4


class Layer:
    """A PyTorch module's shape: weights and forward hooks in the instance's dicts."""

    def __init__(self, weight):
        self.parameters = {"weight": weight}
        self.forward_hooks = {}


def test_a_hook_on_a_layer_whose_weights_an_optimizer_also_holds_is_named():
    # Found on the H200: the weights are exposing objects too, reached first through the optimizer; the
    # search then stopped going up from the layers (nothing unnamed under them yet) and the hook's path,
    # found later, ended at a layer that was never followed further: "no Python root reaches it".
    weights, kept = addresses(2), addresses(6)
    layers = [Layer(FakeArray(a)) for a in weights]
    layers[1].forward_hooks[0] = make_hook(FakeArray(a) for a in kept)
    program = {"model": Trainer({"layers": {str(i): layer for i, layer in enumerate(layers)}}),
               "optimizer": {"params": [layer.parameters["weight"] for layer in layers]}}
    del layers  # the program's globals are the only root
    found = holders.find_holders(blocks_of(weights, "weights") + blocks_of(kept), program, "train.py")
    entry = only_holder(found)
    assert entry["holder"].startswith("a closure of `make_hook.<locals>.hook` (cell `cache`, `model.buffers"), entry
    assert entry["blocks"] == 6
    assert found["complete"]


def test_dict_value_is_named_with_its_key():
    addrs = addresses(1)
    program = {"d": {"k": FakeArray(addrs[0])}}
    entry = only_holder(holders.find_holders(blocks_of(addrs), program, "train.py"))
    assert entry["holder"] == "dict `d` (global in train.py)"
    assert entry["example"] == "d['k']"


def test_a_key_that_is_not_a_plain_value_is_named_by_its_type_not_its_repr():
    class Parameter:  # as torch's optimizer state is keyed: by tensors, whose repr is many lines
        def __repr__(self):
            raise AssertionError("a key's repr runs its own code")

    addrs = addresses(2)
    key = Parameter()
    program = {"state": {key: {"exp_avg": FakeArray(addrs[0])}, "x" * 100: FakeArray(addrs[1])}}
    found = holders.find_holders(blocks_of(addrs), program, "train.py")
    examples = sorted(e["example"] for entries in found["held_by"].values() for e in entries)
    assert "state[<a `Parameter`>]['exp_avg']" in examples, examples
    assert all("\n" not in e and len(e) < 80 for e in examples), examples


def test_nested_positions_are_held_by_the_named_list_above_them():
    addrs = addresses(4)
    program = {"history": [(FakeArray(a), "step %d" % i) for i, a in enumerate(addrs)]}
    entry = only_holder(holders.find_holders(blocks_of(addrs), program, "train.py"))
    assert entry["holder"] == "list `history` (global in train.py)"
    assert entry["blocks"] == 4
    assert entry["example"].startswith("history[") and entry["example"].endswith("][0]")


def test_attribute_of_a_global_instance_names_the_instance():
    addrs = addresses(1)
    trainer = Trainer({})
    trainer.weight = FakeArray(addrs[0])
    program = {"trainer": trainer}
    del trainer
    entry = only_holder(holders.find_holders(blocks_of(addrs), program, "train.py"))
    assert entry["holder"] == "a `Trainer` (global `trainer` in train.py)"
    assert entry["example"] == "trainer.weight"


def search_while_trainer_is_local(blocks, addrs):
    trainer = Trainer({"w": FakeArray(addrs[0]), "b": FakeArray(addrs[1])})
    found = holders.find_holders(blocks)
    del trainer
    return found


def test_attribute_of_an_instance_in_a_live_frame_names_the_local():
    addrs = addresses(2)
    entry = only_holder(search_while_trainer_is_local(blocks_of(addrs), addrs))
    assert entry["holder"].startswith(
        "attribute `.buffers` of a `Trainer` (local `trainer` in search_while_trainer_is_local, test_holders.py:")
    assert entry["example"] in ("trainer.buffers['w']", "trainer.buffers['b']")
    assert entry["blocks"] == 2


def test_attribute_in_a_materialised_instance_dict_is_named_as_an_attribute():
    addrs = addresses(1)
    trainer = Trainer({"w": FakeArray(addrs[0])})
    assert trainer.__dict__["buffers"]  # the instance now refers to its values through a dict
    program = {"trainer": trainer}
    del trainer
    entry = only_holder(holders.find_holders(blocks_of(addrs), program, "train.py"))
    assert entry["holder"] == "attribute `.buffers` of a `Trainer` (global `trainer` in train.py)"
    assert entry["example"] == "trainer.buffers['w']"


def test_program_globals_go_before_a_module_that_holds_the_same_list():
    addrs = addresses(1)
    module = types.ModuleType("main_as_imported")
    module.kept = [FakeArray(addrs[0])]
    sys.modules[module.__name__] = module
    try:
        found = holders.find_holders(blocks_of(addrs), {"kept": module.kept}, "train.py")
    finally:
        del sys.modules[module.__name__]
    assert only_holder(found)["holder"] == "list `kept` (global in train.py)"


def test_array_in_a_local_is_named_by_the_local():
    addrs = addresses(1)
    x = FakeArray(addrs[0])
    entry = only_holder(holders.find_holders(blocks_of(addrs)))
    assert entry["holder"].startswith("local `x` in test_array_in_a_local_is_named_by_the_local (test_holders.py:")
    assert entry["example"] == "x"
    del x


def fail_with_local(address):
    x = FakeArray(address)
    raise ValueError("out of memory")


def test_local_of_a_frame_in_the_exception_being_handled_is_named():
    addrs = addresses(1)
    try:
        fail_with_local(addrs[0])
    except ValueError:
        found = holders.find_holders(blocks_of(addrs))
    entry = only_holder(found)
    assert entry["holder"].startswith("local `x` in fail_with_local (test_holders.py:")


def test_class_attribute_is_named_with_its_class():
    addrs = addresses(2)
    program = {"Registry": type("Registry", (), {"cache": [FakeArray(a) for a in addrs]})}
    entry = only_holder(holders.find_holders(blocks_of(addrs), program, "train.py"))
    assert entry["holder"] == "attribute `.cache` of class `Registry` (global `Registry` in train.py)"
    assert entry["example"] == "Registry.cache[0]"


def test_a_holder_deeper_than_the_level_cap_is_not_named():
    addrs = addresses(1)
    nested = [FakeArray(addrs[0])]
    for _ in range(holders.MAX_LEVELS + 2):
        nested = [nested]
    program = {"deep": nested}
    del nested
    found = holders.find_holders(blocks_of(addrs), program)
    assert found["held_by"] == {}  # neither a holder nor "no Python root": it was not found
    assert not found["complete"]
    assert found["note"].startswith("stopped after %d levels" % holders.MAX_LEVELS)


def test_blocks_nothing_exposes_are_left_out():
    held, unheld = addresses(2), addresses(2)
    program = {"kept": [FakeArray(held[0]), FakeArray(unheld[1] + 16 * BLOCK)]}  # the second is past every block
    found = holders.find_holders(blocks_of(held, "held") + blocks_of(unheld, "unheld"), program)
    assert list(found["held_by"]) == ["held"]
    assert only_holder(found, "held")["blocks"] == 1
    assert found["exposing"] == 1


def make_cycle(array):
    cycle = [array]
    cycle.append(cycle)


def test_array_only_in_a_reference_cycle_has_no_root():
    addrs = addresses(1)
    gc.collect()
    gc.disable()  # the cycle must still be there when the search runs
    try:
        make_cycle(FakeArray(addrs[0]))
        found = holders.find_holders(blocks_of(addrs))
    finally:
        gc.enable()
    entry = only_holder(found)
    assert entry["holder"] == holders.NO_ROOT
    assert found["complete"]


def test_blocks_are_grouped_under_their_own_key():
    a, b = addresses(3), addresses(2)
    program = {"first": [FakeArray(x) for x in a], "second": [FakeArray(x) for x in b]}
    found = holders.find_holders(blocks_of(a, "A") + blocks_of(b, "B"), program, "train.py")
    assert only_holder(found, "A")["holder"] == "list `first` (global in train.py)"
    assert only_holder(found, "A")["bytes"] == 3 * BLOCK
    assert only_holder(found, "B")["holder"] == "list `second` (global in train.py)"
    assert only_holder(found, "B")["bytes"] == 2 * BLOCK


def test_holders_are_ordered_by_bytes_and_capped():
    addrs = addresses(6)
    program = {"one": [FakeArray(addrs[0])], "three": [FakeArray(a) for a in addrs[1:4]],
               "two": [FakeArray(a) for a in addrs[4:]]}
    entries = holders.find_holders(blocks_of(addrs), program, "train.py", max_holders=2)["held_by"]["site-A"]
    assert [e["holder"] for e in entries] == ["list `three` (global in train.py)", "list `two` (global in train.py)"]


def test_dlpack_capsule_is_read_for_the_address():
    addrs = addresses(2)
    program = {"arrays": [DLPackArray(addrs[0], 0), DLPackArray(addrs[1] - 64, 100)]}  # data + byte_offset
    entry = only_holder(holders.find_holders(blocks_of(addrs), program, "train.py"))
    assert entry["holder"] == "list `arrays` (global in train.py)"
    assert entry["blocks"] == 2


def test_numpy_array_is_found_through_dlpack():
    np = pytest.importorskip("numpy")
    program = {"kept": [np.empty(1024, dtype=np.uint8)]}
    start = program["kept"][0].ctypes.data
    entry = only_holder(holders.find_holders([(start, 1024, "np")], program, "train.py"), "np")
    assert entry["holder"] == "list `kept` (global in train.py)"
    assert entry["example"] == "kept[0]"


def test_zero_budget_stops_at_once_and_says_so():
    addrs = addresses(1)
    program = {"kept": [FakeArray(addrs[0])]}
    found = holders.find_holders(blocks_of(addrs), program, budget_s=0)
    assert not found["complete"]
    assert "time budget" in found["note"]
    assert found["held_by"] == {}


def test_objects_that_raise_are_skipped():
    addrs = addresses(1)
    program = {"kept": [BrokenArray(), BrokenDLPack(), FakeArray(addrs[0])]}
    found = holders.find_holders(blocks_of(addrs), program, "train.py")
    assert only_holder(found)["holder"] == "list `kept` (global in train.py)"
    assert found["complete"]


class CustomBaseException(BaseException):
    pass


@pytest.mark.parametrize("kind", [SystemExit, KeyboardInterrupt, GeneratorExit, CustomBaseException])
def test_objects_that_raise_any_base_exception_are_skipped(kind):
    class Raising:
        @property
        def __cuda_array_interface__(self):
            raise kind("raised by the program's object")

    class RaisingDLPack:
        def __dlpack__(self, stream=None):
            raise kind("raised by the program's object")

    addrs = addresses(1)
    program = {"kept": [Raising(), RaisingDLPack(), FakeArray(addrs[0])]}
    try:
        found = holders.find_holders(blocks_of(addrs), program, "train.py")
    except BaseException as e:  # noqa: B036 - what the search must contain, caught here so pytest goes on
        pytest.fail("%r escaped the search" % e)
    assert only_holder(found)["holder"] == "list `kept` (global in train.py)"
    assert found["complete"]


def blocking_arrays(n, release, returned, entered=None):
    """n arrays whose __cuda_array_interface__ blocks (a lock the program holds, a device that hangs) until
    `release` is set, or 20 s; each call is counted in `entered`, and each that comes back in `returned`."""

    class Blocking:
        @property
        def __cuda_array_interface__(self):
            (entered if entered is not None else []).append(1)
            release.wait(20)
            returned.append(1)
            raise RuntimeError("no device memory behind it")

    return [Blocking() for _ in range(n)]


def test_a_search_blocked_in_an_objects_code_is_abandoned_at_its_budget():
    release, returned, entered = threading.Event(), [], []
    addrs = addresses(1)
    program = {"kept": [FakeArray(addrs[0])], "slow": blocking_arrays(3, release, returned, entered)}
    try:
        found = holders.find_holders(blocks_of(addrs), program, "train.py", budget_s=0.2)
        returned_before, entered_before = len(returned), len(entered)
    finally:
        release.set()
    assert returned_before == 0  # the search came back while every blocking call was still blocked
    assert not found["complete"]
    assert found["note"].startswith("time budget of 0.2 s spent while looking for objects that expose the blocks"), \
        found["note"]
    # On a starved CPU (CI beside other builds) the budget can end before the search reaches the blocking
    # objects: then no call was left running, and the note has none to name.
    if entered_before:
        assert "did not return" in found["note"], found["note"]


def wait_for_left_behind_search(seconds=30):
    """Until a search abandoned at its deadline has ended (its blocking object released): on a loaded
    machine it may take a while, and the next search would be skipped meanwhile."""
    deadline = time.monotonic() + seconds
    while "skipped" in (holders.find_holders([], {}, "train.py", budget_s=1).get("note") or ""):
        assert time.monotonic() < deadline, "the abandoned search never ended"
        time.sleep(0.05)


def test_no_search_starts_beside_one_left_behind_that_still_blocks():
    # Reports made while an object's code blocks for good must not leave a blocked thread each.
    release, returned, entered = threading.Event(), [], []
    addrs = addresses(1)
    program = {"kept": [FakeArray(addrs[0])], "slow": blocking_arrays(1, release, returned, entered)}
    try:
        first = holders.find_holders(blocks_of(addrs), program, "train.py", budget_s=0.2)
        second = holders.find_holders(blocks_of(addrs), program, "train.py", budget_s=0.2)
        entered_before = len(entered)
    finally:
        release.set()
    assert "did not return" in first["note"]
    assert entered_before == 1  # the second search never asked the blocking object
    assert not second["complete"] and second["held_by"] == {}
    assert second["note"] == ("holder search skipped: the one an earlier report left behind is still in code of "
                              "the program's that did not return")
    # Once that search has ended, the next one runs as usual.
    wait_for_left_behind_search()
    third = holders.find_holders(blocks_of(addrs), program, "train.py", budget_s=5)
    assert only_holder(third)["holder"] == "list `kept` (global in train.py)"


def test_holders_found_before_a_search_is_abandoned_are_kept(fake_torch):
    release, returned = threading.Event(), []

    class BlockingNode:
        next_functions = ()

        @property
        def _saved_self(self):
            release.wait(20)
            returned.append(1)
            raise RuntimeError("freed by backward()")

    addrs = addresses(1)
    program = {"loss": FakeTensor(addrs[0], BlockingNode())}
    try:
        found = holders.find_holders(blocks_of(addrs), program, "train.py", budget_s=0.2)
        returned_before = len(returned)
    finally:
        release.set()
    wait_for_left_behind_search()  # before the next test searches
    assert returned_before == 0
    assert only_holder(found)["holder"] == "global `loss` in train.py"
    assert not found["complete"]
    assert found["note"].startswith("time budget of 0.2 s spent while walking autograd graphs"), found["note"]


def test_a_failed_search_becomes_a_note():
    found = holders.find_holders([("not an address", BLOCK, "site-A")])
    assert not found["complete"]
    assert found["note"].startswith("holder search failed: ")
    assert found["held_by"] == {}


def test_the_search_keeps_no_reference():
    addrs = addresses(1)
    program = {"kept": [FakeArray(addrs[0])]}
    array = program["kept"][0]
    before = sys.getrefcount(array)
    holders.find_holders(blocks_of(addrs), program, "train.py")
    assert sys.getrefcount(array) == before


def test_a_local_that_changes_after_the_search_is_not_kept_alive():
    addrs = addresses(1)
    x = FakeArray(addrs[0])
    freed = weakref.ref(x)
    holders.find_holders(blocks_of(addrs))
    x = None  # before PEP 667 the frame's f_locals snapshot would still refer to the array
    assert freed() is None


class FakeStorage:
    def __init__(self, address):
        self.address = address

    def data_ptr(self):
        return self.address


class FakeTensor:
    """A torch tensor as the search reads one: its storage's address and its grad_fn."""

    def __init__(self, address, grad_fn=None):
        self.address, self.grad_fn = address, grad_fn

    def untyped_storage(self):
        return FakeStorage(self.address)


class FakeNode:
    """An autograd node: its saved tensor lives in C++ (gc sees no reference), read as a new object each
    time; next_functions leads to the nodes before it."""

    def __init__(self, saved_address, upstream=None):
        self.saved_address = saved_address
        self.next_functions = ((upstream, 0),) if upstream is not None else ()

    @property
    def _saved_self(self):
        return FakeTensor(self.saved_address)


@pytest.fixture
def fake_torch(monkeypatch):
    torch = types.ModuleType("torch")
    torch.Tensor = FakeTensor
    monkeypatch.setitem(sys.modules, "torch", torch)


def test_autograd_graphs_of_kept_losses_are_named_by_their_list(fake_torch):
    losses, saved = addresses(4), addresses(8)
    program = {"val_losses": [FakeTensor(loss, FakeNode(saved[2 * i], FakeNode(saved[2 * i + 1])))
                              for i, loss in enumerate(losses)],
               "loss": FakeTensor(addresses(1)[0], FakeNode(addresses(1)[0]))}
    last = program["loss"]
    blocks = blocks_of(losses, "losses") + blocks_of(saved, "activations") + [
        (last.address, BLOCK, "last"), (last.grad_fn.saved_address, BLOCK, "last activation")]
    del last  # the program's globals name it
    found = holders.find_holders(blocks, program, "train.py")
    entry = only_holder(found, "activations")
    assert entry["holder"] == "the autograd graphs of the tensors in list `val_losses` (global in train.py)"
    assert entry["blocks"] == 8
    assert entry["example"].startswith("val_losses[") and "grad_fn" in entry["example"], entry
    assert only_holder(found, "losses")["holder"] == "list `val_losses` (global in train.py)"
    named = only_holder(found, "last activation")
    assert named["holder"] == "the autograd graph of `loss` (global in train.py)"
    assert named["example"] == "loss.grad_fn._saved_self"
