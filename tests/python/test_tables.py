"""The single tables seen from Python: every status of tracepool_status_map.h has a message and an
exception class that the package exports and its stub declares, and the statistics the module builds
from tracepool_stat_map.h are the ones core reports under the same names. The C++ side is
tests/unit/tables_test.cpp."""

import json
import pathlib
import re

import tracepool
from tracepool import _tracepool

STUB = (pathlib.Path(tracepool.__file__).parent / "_tracepool.pyi").read_text()


def stub_bases(name):
    """The bases that _tracepool.pyi gives class `name`, or None if it declares no such class."""
    found = re.search(r"^class %s\(([^)]*)\):" % re.escape(name), STUB, re.MULTILINE)
    return None if found is None else tuple(base.strip() for base in found.group(1).split(","))


def test_every_status_has_its_own_message_and_ok_alone_is_not_negative():
    codes = [code for code, _, _ in _tracepool._statuses]
    assert codes[0] == 0 and all(code < 0 for code in codes[1:]), codes
    assert len(set(codes)) == len(codes)
    messages = [message for _, message, _ in _tracepool._statuses]
    assert len(set(messages)) == len(messages)
    for code, message in zip(codes, messages):
        assert re.fullmatch(r"TRACEPOOL_(OK|ERR_[A-Z_]+): \S.*", message), message
        assert "unknown status" not in message, code
    assert (-2, "TRACEPOOL_ERR_OOM: out of memory", tracepool.OutOfMemoryError) in _tracepool._statuses


def test_every_error_raises_a_class_the_package_exports_and_the_stub_declares():
    for code, message, cls in _tracepool._statuses[1:]:
        assert issubclass(cls, tracepool.Error), message
        assert getattr(tracepool, cls.__name__) is cls, message
        assert cls.__name__ in tracepool.__all__, message
        assert stub_bases(cls.__name__) == tuple(base.__name__ for base in cls.__bases__), message


def test_the_module_makes_no_exception_class_that_no_status_raises():
    made = {value for value in vars(_tracepool).values() if isinstance(value, type) and issubclass(value, Exception)}
    assert made == {cls for _, _, cls in _tracepool._statuses[1:]} | {tracepool.Error}


def test_the_python_statistics_are_the_ones_core_reports_under_each_name():
    kept = [tracepool.alloc(n) for n in (1000, 5 << 20)]
    tracepool.free(tracepool.alloc(3000))
    reported = json.loads(tracepool.report("json"))["stats"]["0"]
    flat, nested = _tracepool.stats(0), _tracepool.nested_stats(0)
    for ptr in kept:
        tracepool.free(ptr)
    assert flat == reported
    kinds = [key for key, value in nested.items() if isinstance(value, dict)]
    assert kinds and all(f"{kind}.all.current" in reported for kind in kinds)
