// cupy_hooks.cpp: tracepool.cupy._hooks, an extension of its own that holds CuPy's CFunctionAllocator
// hooks over the process-wide instance (they need the interpreter: CuPy's stream and exceptions are
// Python's). It links libtracepool.so and nothing of the package's own extension: the classes it
// raises are handed to install(). tracepool.cupy.install() passes the hooks' addresses to
// cupy.cuda.memory.CFunctionAllocator.
//
// What CuPy gives them (cupy/cuda/memory.pyx, CuPy 14; ../shared/notes/hooks_and_rmm.md section 2):
//   void* malloc(void* param, size_t size, int device_id)   declared `except +`, called with the GIL
//                                                            held, device_id the current device;
//   void free(void* param, void* ptr, int device_id)        noexcept, from the dealloc of the last
//                                                            reference, on any thread, at exit too.
// No stream, and free gets no size. The stream: CuPy's own C function get_current_stream_ptr (the
// capsule "intptr_t (void)" in cupy_backends.cuda.stream.__pyx_capi__), called with the GIL held, so
// an array is allocated on the stream CuPy's kernels for it run on, and tracepool's stream rules keep
// reuse safe (same stream at once, another stream after an event). A free needs no stream: the block
// remembers its own. Without the capsule tracepool.cupy refuses to install (stream 0 would be wrong
// under `with cupy.cuda.Stream():`).
//
// Failures: CuPy does not check a NULL return (it would make an array at address 0), so malloc sets a
// Python exception and throws; Cython's `except +` then keeps the Python exception. Out of memory is
// tracepool.cupy's OutOfMemoryError, both CuPy's cupy.cuda.memory.OutOfMemoryError and
// tracepool.OutOfMemoryError, with tracepool's message (who holds the memory); anything else is
// tracepool's class for the status.
// clang-format off: pybind11 (Python.h) first, as it sets feature macros that system headers read.
#include <pybind11/pybind11.h>
// clang-format on

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>

#include "tracepool/tracepool.h"

namespace py = pybind11;

namespace {

using stream_fn = intptr_t (*)();

// Set by install(), with the GIL held (as every hook runs), before CuPy can call a hook; kept until a
// later install() replaces them.
stream_fn current_stream = nullptr;
PyObject* oom_class = nullptr;      // tracepool.cupy.OutOfMemoryError
PyObject* error_classes = nullptr;  // {status: tracepool's class for it}

// Sets the Python error of a failed call: `cls` (tracepool's class for the status where NULL) made from
// tracepool's message, with the status as its `status` attribute. If that fails, its failure is set.
void set_error(int status, const char* message, PyObject* cls) {
  PyObject* code = PyLong_FromLong(status);
  if (code == nullptr) return;
  if (cls == nullptr) cls = PyDict_GetItemWithError(error_classes, code);  // borrowed
  if (cls == nullptr && PyErr_Occurred() == nullptr) cls = PyExc_RuntimeError;
  if (cls == nullptr) {  // the lookup failed: its error is the one set
    Py_DECREF(code);
    return;
  }
  const char* text = message != nullptr && *message != '\0' ? message : tracepool_status_string(status);
  // A message may quote a path that is not UTF-8: undecodable bytes become U+FFFD, not a second error.
  PyObject* error = nullptr;
  if (PyObject* decoded = PyUnicode_DecodeUTF8(text, static_cast<Py_ssize_t>(std::strlen(text)), "replace")) {
    error = PyObject_CallOneArg(cls, decoded);
    Py_DECREF(decoded);
  }
  if (error != nullptr && PyObject_SetAttrString(error, "status", code) == 0) PyErr_SetObject(cls, error);
  Py_XDECREF(error);
  Py_DECREF(code);
}

// Thrown after the Python error is set: Cython's `except +` handler sees the error and keeps it.
struct python_error_set : std::exception {
  const char* what() const noexcept override { return "tracepool.cupy: see the Python exception"; }
};

void* cupy_malloc(void* /*param*/, size_t size, int device_id) {
  intptr_t stream = 0;
  if (current_stream != nullptr) {
    stream = current_stream();
    if (PyErr_Occurred() != nullptr) throw python_error_set();  // whatever value it returned
    // CuPy's per-thread default stream has one handle in every thread: tracepool would take two
    // threads' streams for one and reuse a block across them with no event between.
    if (stream == 2) {
      PyErr_SetString(PyExc_RuntimeError,
                      "tracepool.cupy: CuPy's per-thread default stream (cupy.cuda.Stream.ptds, handle 2) is not "
                      "supported: its handle is the same in every thread; use a cupy.cuda.Stream of your own");
      throw python_error_set();
    }
  }
  // The GIL stays held (CuPy holds it here; GIL then allocator is the lock order). Released, a daemon
  // thread re-taking it while the interpreter finalises is unwound by force, and CuPy's `except +`
  // handler swallows that unwind: the process aborts.
  void* ptr = nullptr;
  const char* message = nullptr;
  int status = TRACEPOOL_OK;
  tracepool_t* tp = tracepool_default();
  if (tp == nullptr) {
    status = TRACEPOOL_ERR_UNAVAILABLE;
    message = tracepool_last_error();
  } else if (tracepool_tag_push("cupy") == TRACEPOOL_OK) {  // the report says which runtime asked
    status = tracepool_malloc(tp, size, device_id, reinterpret_cast<void*>(stream), &ptr);
    if (status != TRACEPOOL_OK) message = tracepool_last_error();  // thread-local: before the next call
    if (tracepool_tag_pop() != TRACEPOOL_OK && status == TRACEPOOL_OK) {
      (void)tracepool_free(tp, ptr, nullptr);
      status = TRACEPOOL_ERR_INTERNAL;
      message = "tracepool.cupy: the tag pushed for this allocation was gone";
    }
  } else {
    status = TRACEPOOL_ERR_INTERNAL;
    message = tracepool_last_error();
  }
  if (status == TRACEPOOL_OK) return ptr;
  set_error(status, message, status == TRACEPOOL_ERR_OOM ? oom_class : nullptr);
  throw python_error_set();
}

void cupy_free(void* /*param*/, void* ptr, int /*device_id*/) noexcept {
  // May run while the interpreter finalises: no Python here, and the GIL is kept (a thread that
  // re-takes it then is unwound by force, which terminates the process inside a noexcept frame).
  tracepool_t* tp = tracepool_default();
  if (tp != nullptr && tracepool_free(tp, ptr, nullptr) == TRACEPOOL_OK) return;
  // CuPy frees only what this hook returned: a refusal is a bug somewhere, said and counted.
  std::fprintf(stderr, "tracepool.cupy: free of %p refused: %s\n", ptr, tracepool_last_error());
}

// install(): the capsule must be exactly the function the hooks call.
stream_fn stream_function(const py::object& capsule) {
  if (capsule.is_none()) return nullptr;  // stream 0: tests without a driver only
  const char* name = PyCapsule_GetName(capsule.ptr());
  if (name == nullptr) throw py::error_already_set();
  if (std::string_view(name) != "intptr_t (void)")
    throw py::type_error(std::string("tracepool.cupy: CuPy's get_current_stream_ptr has signature '") + name +
                         "', not 'intptr_t (void)'");
  auto fn = reinterpret_cast<stream_fn>(PyCapsule_GetPointer(capsule.ptr(), name));
  if (fn == nullptr) throw py::error_already_set();
  return fn;
}

}  // namespace

PYBIND11_MODULE(_hooks, m) {
  m.doc() = "CuPy's CFunctionAllocator hooks over tracepool's process-wide instance; use tracepool.cupy.";
  m.def(
      "install",
      [](py::object stream_capsule, py::object oom, py::dict classes) {
        const stream_fn fn = stream_function(stream_capsule);
        oom.inc_ref();  // kept past the module's own references: the hooks may run at the process's end
        classes.inc_ref();
        Py_XDECREF(oom_class);
        Py_XDECREF(error_classes);
        oom_class = oom.ptr();
        error_classes = classes.ptr();
        current_stream = fn;
        return py::make_tuple(reinterpret_cast<uintptr_t>(&cupy_malloc), reinterpret_cast<uintptr_t>(&cupy_free));
      },
      py::arg("stream_capsule"), py::arg("oom_class"), py::arg("error_classes"),
      "Sets CuPy's current-stream function (a capsule, or None for stream 0), the class raised for out of "
      "memory and {status: class} for the rest; returns the (malloc, free) hook addresses.");
}
