// cupy_hooks.cpp: CuPy's CFunctionAllocator hooks over the process-wide instance, built into the
// extension tracepool._tracepool (they need the interpreter: CuPy's stream and exceptions are Python's).
// tracepool.cupy.install() passes their addresses to cupy.cuda.memory.CFunctionAllocator.
//
// What CuPy gives them (cupy/cuda/memory.pyx, CuPy 14; ../shared/notes/hooks_and_rmm.md section 2):
//   void* malloc(void* param, size_t size, int device_id)   declared `except +`, called with the GIL
//                                                            held, device_id the current device;
//   void free(void* param, void* ptr, int device_id)        noexcept, from the dealloc of the last
//                                                            reference, on any thread, at exit too.
// No stream, and free gets no size. The stream: CuPy's own C function get_current_stream_ptr (the
// capsule "intptr_t (void)" in cupy_backends.cuda.stream.__pyx_capi__), called with the GIL held, so
// an array is allocated on the stream CuPy's kernels for it run on, and tracepool's stream rules keep
// reuse safe (same stream at once, another stream after an event). Without the capsule, stream 0.
// A free needs no stream: the block remembers its own. Without the capsule tracepool.cupy refuses to
// install (stream 0 would be wrong under `with cupy.cuda.Stream():`).
//
// Failures: CuPy does not check a NULL return (it would make an array at address 0), so malloc sets a
// Python exception and throws; Cython's `except +` then keeps the Python exception. Out of memory is
// tracepool.cupy's OutOfMemoryError, both CuPy's cupy.cuda.memory.OutOfMemoryError and
// tracepool.OutOfMemoryError, with tracepool's message (who holds the memory); anything else is
// tracepool's class for the status.
#include <Python.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string_view>

#include "cupy_hooks.h"
#include "python_errors.h"
#include "tracepool/tracepool.h"

namespace {

using stream_fn = intptr_t (*)();

// Set once by cupy_hooks_install, with the GIL held, before CuPy can call a hook; never released.
stream_fn current_stream = nullptr;
PyObject* oom_class = nullptr;

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
  set_python_error(status, message, status == TRACEPOOL_ERR_OOM ? oom_class : nullptr);
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

}  // namespace

bool cupy_hooks_install(PyObject* stream_capsule, PyObject* oom) {
  stream_fn fn = nullptr;
  if (stream_capsule != Py_None) {
    // The capsule's name is the function's C signature; any other would be called wrongly.
    const char* name = PyCapsule_GetName(stream_capsule);
    if (name == nullptr) return false;
    if (std::string_view(name) != "intptr_t (void)") {
      PyErr_Format(PyExc_TypeError, "tracepool.cupy: CuPy's get_current_stream_ptr has signature '%s', not "
                   "'intptr_t (void)'", name);
      return false;
    }
    fn = reinterpret_cast<stream_fn>(PyCapsule_GetPointer(stream_capsule, name));
    if (fn == nullptr) return false;
  }
  Py_INCREF(oom);
  Py_XDECREF(oom_class);
  oom_class = oom;
  current_stream = fn;
  return true;
}

uintptr_t cupy_malloc_address() { return reinterpret_cast<uintptr_t>(&cupy_malloc); }
uintptr_t cupy_free_address() { return reinterpret_cast<uintptr_t>(&cupy_free); }
