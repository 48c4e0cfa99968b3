"""What the holder search's tests (test_holders.py) and its benchmark (tests/bench/holders_bench.py) share:
the search loaded from the source tree, and a fake device array."""

import importlib
import os
import sys
import types


def load_holders():
    """tracepool._holders from the source tree: the package's folder as a package without its __init__
    (which loads the extension), so that no build is needed."""
    source = types.ModuleType("tracepool_source")
    source.__path__ = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bindings", "python",
                                    "tracepool")]
    sys.modules["tracepool_source"] = source
    return importlib.import_module("tracepool_source._holders")


class FakeArray:
    """A device array as CuPy and Numba show one: an address and nothing behind it."""

    def __init__(self, address, size=4096):
        self.address, self.size = address, size

    @property
    def __cuda_array_interface__(self):
        return {"data": (self.address, False), "shape": (self.size,), "typestr": "|u1", "version": 3}
