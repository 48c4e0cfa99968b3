"""host.py: a Python program that uses tracepool's C API through ctypes alone (no tracepool package).

    python3 examples/ctypes/host.py [path/to/libtracepool.so]

The library is the argument, else $TRACEPOOL_LIBRARY, else whatever ctypes.util.find_library finds
(an installed tracepool). It allocates through tracepool_malloc, names its phases with tags, marks
each round, keeps one buffer per round (the leak), and prints the text report: the leak's site
carries the tag "ctypes: keep" and is flagged GROWING. Without the tracepool package nothing walks
the Python stack, so sites are native frames (ctypes' own) and the tags are what names the Python
code; `import tracepool` adds the Python lines. Run in CI on the host backend and by the GPU check
on CUDA. Exit status 0 if every call succeeded.
"""

import ctypes
import ctypes.util
import os
import sys

OK = 0


class ReportOptions(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("reason", ctypes.c_char_p),
        ("format", ctypes.c_char_p),
        ("top", ctypes.c_int),
        ("name", ctypes.c_char_p),
    ]


def load(path):
    lib = ctypes.CDLL(path)
    lib.tracepool_default.restype = ctypes.c_void_p
    lib.tracepool_default.argtypes = []
    lib.tracepool_backend_name.restype = ctypes.c_char_p
    lib.tracepool_backend_name.argtypes = [ctypes.c_void_p]
    lib.tracepool_malloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                                     ctypes.POINTER(ctypes.c_void_p)]
    lib.tracepool_free.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.tracepool_tag_push.argtypes = [ctypes.c_char_p]
    lib.tracepool_tag_pop.argtypes = []
    lib.tracepool_mark.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.tracepool_report_string_with.argtypes = [ctypes.c_void_p, ctypes.POINTER(ReportOptions),
                                                 ctypes.POINTER(ctypes.c_void_p)]
    lib.tracepool_string_free.argtypes = [ctypes.c_void_p]
    lib.tracepool_last_error.restype = ctypes.c_char_p
    lib.tracepool_last_error.argtypes = []
    lib.tracepool_status_string.restype = ctypes.c_char_p
    lib.tracepool_status_string.argtypes = [ctypes.c_int]
    for name in ("tracepool_malloc", "tracepool_free", "tracepool_tag_push", "tracepool_tag_pop", "tracepool_mark",
                 "tracepool_report_string_with"):
        getattr(lib, name).restype = ctypes.c_int
    return lib


class TracepoolError(RuntimeError):
    pass


class Tracepool:
    """The default instance of the library at `path`: every call checked, errors as exceptions."""

    def __init__(self, path):
        self.lib = load(path)
        self.tp = self.lib.tracepool_default()
        if not self.tp:
            raise TracepoolError("tracepool_default: %s" % self.lib.tracepool_last_error().decode())

    def check(self, status, what):
        if status != OK:
            raise TracepoolError("%s: %s: %s" % (what, self.lib.tracepool_status_string(status).decode(),
                                                 self.lib.tracepool_last_error().decode()))

    def malloc(self, size, device=0, stream=None):
        ptr = ctypes.c_void_p()
        self.check(self.lib.tracepool_malloc(self.tp, size, device, stream, ctypes.byref(ptr)), "tracepool_malloc")
        return ptr.value

    def free(self, ptr):
        self.check(self.lib.tracepool_free(self.tp, ptr, None), "tracepool_free")

    def tag(self, label):
        lib, check = self.lib, self.check

        class Scope:
            def __enter__(self):
                check(lib.tracepool_tag_push(label.encode()), "tracepool_tag_push")

            def __exit__(self, *exc):
                check(lib.tracepool_tag_pop(), "tracepool_tag_pop")

        return Scope()

    def mark(self, label):
        self.check(self.lib.tracepool_mark(self.tp, label.encode()), "tracepool_mark")

    def report(self, top=3):
        options = ReportOptions(ctypes.sizeof(ReportOptions), None, b"text", top, None)
        text = ctypes.c_void_p()
        self.check(self.lib.tracepool_report_string_with(self.tp, ctypes.byref(options), ctypes.byref(text)),
                   "tracepool_report_string_with")
        try:
            return ctypes.string_at(text.value).decode()
        finally:
            self.lib.tracepool_string_free(text)

    @property
    def backend(self):
        return self.lib.tracepool_backend_name(self.tp).decode()


def library_path(argv):
    if len(argv) > 1:
        return argv[1]
    if os.environ.get("TRACEPOOL_LIBRARY"):
        return os.environ["TRACEPOOL_LIBRARY"]
    found = ctypes.util.find_library("tracepool")
    if found is None:
        sys.exit("host.py: no libtracepool.so: pass its path, or set TRACEPOOL_LIBRARY")
    return found


def main(argv):
    tp = Tracepool(library_path(argv))
    print("ctypes host on the %s backend" % tp.backend)
    kept = []
    for round_ in range(4):
        with tp.tag("ctypes: scratch"):
            scratch = [tp.malloc(64 << 10) for _ in range(8)]
            for ptr in scratch:
                tp.free(ptr)
        with tp.tag("ctypes: keep"):
            kept.append(tp.malloc(256 << 10))  # the leak: one more buffer every round
        tp.mark("round %d" % round_)
    print(tp.report())
    try:
        tp.malloc(1 << 62)
        print("host.py: a 4 EiB request succeeded", file=sys.stderr)
        return 1
    except TracepoolError as e:
        print("refused as expected: %s" % e)
    for ptr in kept:
        tp.free(ptr)
    try:
        tp.free(kept[0])  # a double free is an error, not a crash
        print("host.py: a double free was accepted", file=sys.stderr)
        return 1
    except TracepoolError as e:
        print("double free refused: %s" % e)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
