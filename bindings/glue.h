// glue.h: what the parts of the extension tracepool._tracepool share (module.cpp: memory, statistics,
// the history, Python frames; reports.cpp: marks, reports and files; glue.cpp): every failure status
// raised as a tracepool.Error, calls made without the GIL, strings and bytes across the C API, the
// report options and a Python holder search behind the C callback.
#pragma once

// clang-format off: pybind11 (Python.h) first, as it sets feature macros that system headers read.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
// clang-format on

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tracepool/tracepool.h"

namespace tracepool_py {

namespace py = pybind11;

// ---- Errors -----------------------------------------------------------------------------------------

// tracepool.Error and its subclasses (one per python_class of tracepool_status_map.h), made at import.
void make_error_classes(py::module_& m);
// Raises the class for `status`, carrying the status as its `status` attribute. `message` is
// tracepool_last_error() of the failed call, read on the thread that made it.
[[noreturn]] void raise_status(int status, const char* message);
void check(int status);
// A label or path for C: an embedded NUL would silently cut it short.
const char* c_text(const std::string& text, const char* what);

// ---- Calls on the default instance ------------------------------------------------------------------

// Runs `call()` (returning a status) with the GIL released, and raises on failure. Released so that a
// thread waiting on the device, on tracepool's locks or on a file never stalls Python, and so that the
// frame provider reads this thread's frames exactly as it does under a PyTorch op. Released and
// re-taken by hand rather than by gil_scoped_release: while the interpreter finalises, a daemon
// thread that re-takes the GIL exits by forced unwinding, and that terminates the process when it
// passes through a destructor (which is noexcept).
//
// That forced unwind must leave every catch (...) it meets by a rethrow, as pybind11's does under
// libstdc++ (abi::__forced_unwind). libc++ (the portable wheel, .ci/build_wheel.sh) has no such type,
// so pybind11's catch (...) would end it and glibc would abort the process ("FATAL: exception not
// rethrown"). There the daemon thread is parked instead, holding nothing, until the process exits
// (what CPython 3.14 does to such threads): restore_thread's handler is never left, so the unwind never ends.
void restore_thread(PyThreadState* saved);

template <typename Call>
void call_without_gil(Call&& call) {
  PyThreadState* saved = PyEval_SaveThread();
  const int status = call();
  // Thread-local, and valid until this thread's next tracepool call: none happens before the raise.
  const char* message = status != TRACEPOOL_OK ? tracepool_last_error() : nullptr;
  restore_thread(saved);
  if (status != TRACEPOOL_OK) raise_status(status, message);
}

// Runs `call(tp)` on the default instance, as call_without_gil.
template <typename Call>
void call_default(Call&& call) {
  call_without_gil([&] {
    tracepool_t* tp = tracepool_default();  // the first call creates it, possibly initialising CUDA
    return tp != nullptr ? call(tp) : TRACEPOOL_ERR_UNAVAILABLE;
  });
}

// A string from the library, as str. JSON is UTF-8 already; a text report quotes file and function
// names as the system gave them, so bytes that are not UTF-8 become U+FFFD, as the JSON writer makes them.
py::str take_string(char* text);

// The bytes of a bytes object, which its caller keeps alive (and which cannot change) while they are read:
// the library may read them without the GIL.
std::string_view bytes_of(const py::bytes& b);

// ---- Reports ----------------------------------------------------------------------------------------

// A Python holder search (tracepool._holders) behind tracepool_holders_fn. The report calls it with
// the GIL released and no lock of tracepool held; it takes the GIL for the search (lock order: GIL,
// then allocator). What it raises is kept and raised once the report call has returned.
struct holder_call {
  py::object search;  // blocks -> JSON str, or None; None here: no search asked
  std::optional<py::error_already_set> error;

  static char* run(void* context, const tracepool_leak_block_t* blocks, size_t count);
  // After the report call: the search's exception, if it raised; else what the call raised, if it did.
  template <class Call>
  void call(Call&& report) {
    try {
      report();
    } catch (...) {
      if (error) throw std::move(*error);
      throw;
    }
  }
};

// Saved reports (bytes objects, kept alive by the caller) as the C calls that read several take them.
struct saved_reports {
  std::vector<const char*> texts, names;
  std::vector<size_t> sizes;
  saved_reports(const std::vector<py::bytes>& saved, const std::vector<std::string>& labels, const char* what);
};

// tracepool_report_options_t over strings that outlive it (the caller's arguments).
struct report_options {
  tracepool_report_options_t c{};
  report_options(const std::string* format, const std::optional<std::string>& reason, int top,
                 bool addresses = false, holder_call* holders = nullptr) {
    c.size = sizeof c;
    c.addresses = addresses ? 1 : 0;
    c.format = format != nullptr ? c_text(*format, "format") : nullptr;
    c.reason = reason ? c_text(*reason, "reason") : nullptr;
    c.top = top;
    if (holders != nullptr && !holders->search.is_none()) {
      c.holders = &holder_call::run;
      c.holders_context = holders;
    }
  }
};

// The areas of the module that reports.cpp registers (PYBIND11_MODULE in module.cpp).
void def_marks_and_reports(py::module_& m);
void def_files(py::module_& m);

}  // namespace tracepool_py
