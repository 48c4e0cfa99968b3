// glue.cpp: the shared pieces of the extension (glue.h).
#include "glue.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>

namespace tracepool_py {

namespace {

// tracepool.Error and its subclasses: the python_class column of tracepool_status_map.h names one of
// these for each status. A subclass is also the builtin exception of its kind, so that a caller's
// `except MemoryError` or `except ValueError` catches it. The classes are made at import and never
// released: they live as long as the process, like the module.
struct exception_class {
  const char* name;       // tracepool.<name>
  PyObject* const* kind;  // the builtin base: RuntimeError for Error itself
  const char* doc;
  PyObject* object;
};
exception_class Error{"Error", &PyExc_RuntimeError, "A tracepool call failed; `status` holds its status code.",
                      nullptr};
exception_class OutOfMemoryError{"OutOfMemoryError", &PyExc_MemoryError,
                                 "The device, or the configured limit, cannot hold the request.", nullptr};
exception_class InvalidArgumentError{
    "InvalidArgumentError", &PyExc_ValueError,
    "The caller's mistake: a bad argument or configuration, an unknown pointer, a double free, a bad device.", nullptr};
exception_class* const exception_classes[] = {&Error, &OutOfMemoryError, &InvalidArgumentError};

PyObject* class_for(int status) {
  switch (status) {
#define TRACEPOOL_STATUS_CLASS_(name, core_name, code, message, python_class) \
  case TRACEPOOL_##name:                                                      \
    return python_class.object;
    TRACEPOOL_STATUS_MAP(TRACEPOOL_STATUS_CLASS_)
#undef TRACEPOOL_STATUS_CLASS_
  }
  return Error.object;
}

}  // namespace

[[noreturn]] void raise_status(int status, const char* message) {
  py::handle cls(class_for(status));
  const char* text = message != nullptr && *message != '\0' ? message : tracepool_status_string(status);
  // A message may quote a path that is not UTF-8: undecodable bytes become U+FFFD, not a second error.
  const py::str decoded =
      py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(text, static_cast<Py_ssize_t>(std::strlen(text)), "replace"));
  if (!decoded) throw py::error_already_set();
  py::object error = cls(decoded);
  error.attr("status") = status;
  PyErr_SetObject(cls.ptr(), error.ptr());
  throw py::error_already_set();
}

void check(int status) {
  if (status != TRACEPOOL_OK) raise_status(status, tracepool_last_error());
}

const char* c_text(const std::string& text, const char* what) {
  if (text.find('\0') != std::string::npos) {
    const std::string message = std::string(what) + " contains a NUL character";
    raise_status(TRACEPOOL_ERR_INVALID_ARGUMENT, message.c_str());
  }
  return text.c_str();
}

void make_error_classes(py::module_& m) {
  for (exception_class* c : exception_classes) {
    const std::string qualified = std::string("tracepool.") + c->name;
    const py::tuple bases = c == &Error ? py::tuple(py::make_tuple(py::handle(*c->kind)))
                                        : py::tuple(py::make_tuple(py::handle(Error.object), py::handle(*c->kind)));
    c->object = PyErr_NewExceptionWithDoc(qualified.c_str(), c->doc, bases.ptr(), nullptr);
    if (c->object == nullptr) throw py::error_already_set();
    m.attr(c->name) = py::handle(c->object);
  }
  // (code, "TRACEPOOL_ERR_OOM: out of memory", class) for every status: tests check the table's rows
  // against what the package exports.
  py::list statuses;
#define TRACEPOOL_STATUS_ROW_(name, core_name, code, message, python_class)                        \
  statuses.append(py::make_tuple(int{TRACEPOOL_##name}, tracepool_status_string(TRACEPOOL_##name), \
                                 py::handle(class_for(TRACEPOOL_##name))));
  TRACEPOOL_STATUS_MAP(TRACEPOOL_STATUS_ROW_)
#undef TRACEPOOL_STATUS_ROW_
  m.attr("_statuses") = py::tuple(statuses);
}

void restore_thread(PyThreadState* saved) {
#if defined(_LIBCPP_VERSION)
  try {
    PyEval_RestoreThread(saved);
  } catch (...) {  // only pthread_exit's forced unwind comes out of a C function
    for (;;) pause();
  }
#else
  PyEval_RestoreThread(saved);
#endif
}

py::str take_string(char* text) {
  std::unique_ptr<char, void (*)(char*)> owned(text, tracepool_string_free);
  const char* s = owned.get() != nullptr ? owned.get() : "";
  PyObject* decoded = PyUnicode_DecodeUTF8(s, static_cast<Py_ssize_t>(std::strlen(s)), "replace");
  if (decoded == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(decoded);
}

std::string_view bytes_of(const py::bytes& b) {
  char* data = nullptr;
  Py_ssize_t size = 0;
  if (PyBytes_AsStringAndSize(b.ptr(), &data, &size) != 0) throw py::error_already_set();
  return {data, static_cast<size_t>(size)};
}

char* holder_call::run(void* context, const tracepool_leak_block_t* blocks, size_t count) {
  auto* self = static_cast<holder_call*>(context);
  py::gil_scoped_acquire gil;
  try {
    py::list list(count);
    for (size_t i = 0; i < count; ++i)
      list[i] = py::make_tuple(blocks[i].address, blocks[i].bytes, blocks[i].leak);
    const py::object found = self->search(list);
    if (found.is_none()) return nullptr;
    const std::string text = found.cast<std::string>();
    char* out = static_cast<char*>(std::malloc(text.size() + 1));
    if (out != nullptr) std::memcpy(out, text.c_str(), text.size() + 1);
    return out;
  } catch (py::error_already_set& e) {
    self->error.emplace(std::move(e));
  } catch (const py::cast_error&) {
    PyErr_SetString(PyExc_TypeError, "the holder search must return a str of JSON or None");
    self->error.emplace();
  }
  // An answer that is no JSON fails the report, so that nothing is written; the caller raises the
  // search's own exception instead of the library's message.
  return strdup("the holder search raised");
}

saved_reports::saved_reports(const std::vector<py::bytes>& saved, const std::vector<std::string>& labels,
                             const char* what) {
  if (labels.size() != saved.size()) throw py::value_error(std::string(what) + ": one name for each report");
  for (size_t i = 0; i < saved.size(); ++i) {
    const std::string_view text = bytes_of(saved[i]);
    texts.push_back(text.data());
    sizes.push_back(text.size());
    names.push_back(c_text(labels[i], "name"));
  }
}

}  // namespace tracepool_py
