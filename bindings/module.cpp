// module.cpp: tracepool._tracepool, the extension behind the Python package. Thin wrappers over the C
// API of the process-wide instance (tracepool_default()), with every failure status raised as a
// tracepool.Error; importing it registers the CPython frame provider (python_frames.c).
//
// The extension links libtracepool.so, the same file that tracepool.library_path() names and that
// PyTorch loads with ctypes, so the process has one allocator whichever door a caller comes in by.
// clang-format off: pybind11 (Python.h) first, as it sets feature macros that system headers read.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
// clang-format on

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "python_frames.h"
#include "tracepool/tracepool.h"

namespace py = pybind11;

namespace {

// ---- Errors -----------------------------------------------------------------------------------------

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

// Raises the class for `status`, carrying the status as its `status` attribute. `message` is
// tracepool_last_error() of the failed call, read on the thread that made it.
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

// A label or path for C: an embedded NUL would silently cut it short.
const char* c_text(const std::string& text, const char* what) {
  if (text.find('\0') != std::string::npos) {
    const std::string message = std::string(what) + " contains a NUL character";
    raise_status(TRACEPOOL_ERR_INVALID_ARGUMENT, message.c_str());
  }
  return text.c_str();
}

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
// (what CPython 3.14 does to such threads): the handler below is never left, so the unwind never ends.
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
py::str take_string(char* text) {
  std::unique_ptr<char, void (*)(char*)> owned(text, tracepool_string_free);
  const char* s = owned.get() != nullptr ? owned.get() : "";
  PyObject* decoded = PyUnicode_DecodeUTF8(s, static_cast<Py_ssize_t>(std::strlen(s)), "replace");
  if (decoded == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(decoded);
}

// The bytes of a bytes object, which its caller keeps alive (and which cannot change) while they are read:
// the library may read them without the GIL.
std::string_view bytes_of(const py::bytes& b) {
  char* data = nullptr;
  Py_ssize_t size = 0;
  if (PyBytes_AsStringAndSize(b.ptr(), &data, &size) != 0) throw py::error_already_set();
  return {data, static_cast<size_t>(size)};
}

// tracepool_report_options_t over strings that outlive it (the caller's arguments).
// A Python holder search (tracepool._holders) behind tracepool_holders_fn. The report calls it with
// the GIL released and no lock of tracepool held; it takes the GIL for the search (lock order: GIL,
// then allocator). What it raises is kept and raised once the report call has returned.
struct holder_call {
  py::object search;  // blocks -> JSON str, or None; None here: no search asked
  std::optional<py::error_already_set> error;

  static char* run(void* context, const tracepool_leak_block_t* blocks, size_t count) {
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
  saved_reports(const std::vector<py::bytes>& saved, const std::vector<std::string>& labels, const char* what) {
    if (labels.size() != saved.size()) throw py::value_error(std::string(what) + ": one name for each report");
    for (size_t i = 0; i < saved.size(); ++i) {
      const std::string_view text = bytes_of(saved[i]);
      texts.push_back(text.data());
      sizes.push_back(text.size());
      names.push_back(c_text(labels[i], "name"));
    }
  }
};

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

// ---- Statistics -------------------------------------------------------------------------------------

struct stat_kind {
  const char* name;
  tracepool_stat_t tracepool_stat_set_t::*member;
};
constexpr stat_kind stat_kinds[] = {
#define TRACEPOOL_STAT_KIND_(name) {#name, &tracepool_stat_set_t::name},
    TRACEPOOL_STAT_MAP(TRACEPOOL_STAT_KIND_)
#undef TRACEPOOL_STAT_KIND_
};

struct counter {
  const char* name;
  uint64_t tracepool_stats_t::*member;
};
constexpr counter counters[] = {
    {"num_alloc_retries", &tracepool_stats_t::num_alloc_retries},
    {"num_ooms", &tracepool_stats_t::num_ooms},
    {"num_device_alloc", &tracepool_stats_t::num_device_alloc},
    {"num_device_free", &tracepool_stats_t::num_device_free},
    {"num_invalid_frees", &tracepool_stats_t::num_invalid_frees},
    {"limit_bytes", &tracepool_stats_t::limit_bytes},
};

struct pool {
  const char* name;
  tracepool_stat_set_t stats;
};

tracepool_stats_t device_stats(int device) {
  tracepool_stats_t stats{};
  stats.size = sizeof stats;
  call_default([&](tracepool_t* tp) { return tracepool_get_stats(tp, device, &stats); });
  return stats;
}

// PyTorch's three pool columns: the top level of tracepool_stats_t is "all".
std::array<pool, 3> pools_of(const tracepool_stats_t& s) {
  const tracepool_stat_set_t all{
#define TRACEPOOL_STAT_OF_ALL_(name) s.name,
      TRACEPOOL_STAT_MAP(TRACEPOOL_STAT_OF_ALL_)
#undef TRACEPOOL_STAT_OF_ALL_
  };
  return {pool{"all", all}, pool{"small_pool", s.small_pool}, pool{"large_pool", s.large_pool}};
}

struct stat_field {
  const char* name;
  uint64_t tracepool_stat_t::*member;
};
constexpr stat_field stat_fields[] = {
    {"current", &tracepool_stat_t::current},
    {"peak", &tracepool_stat_t::peak},
    {"allocated", &tracepool_stat_t::allocated},
    {"freed", &tracepool_stat_t::freed},
};

// torch.cuda.memory_stats(): "allocated_bytes.all.current", ..., "num_ooms", ...
py::dict flat_stats(int device) {
  const tracepool_stats_t s = device_stats(device);
  py::dict out;
  for (const stat_kind& kind : stat_kinds)
    for (const pool& p : pools_of(s))
      for (const stat_field& field : stat_fields) {
        const std::string key = std::string(kind.name) + "." + p.name + "." + field.name;
        out[key.c_str()] = (p.stats.*kind.member).*field.member;
      }
  for (const counter& c : counters) out[c.name] = s.*c.member;
  return out;
}

// torch._C._cuda_memoryStats(): {"allocated_bytes": {"all": {"current": ...}, ...}, ..., "num_ooms": n}
py::dict nested_stats(int device) {
  const tracepool_stats_t s = device_stats(device);
  py::dict out;
  for (const stat_kind& kind : stat_kinds) {
    py::dict by_pool;
    for (const pool& p : pools_of(s)) {
      py::dict fields;
      for (const stat_field& field : stat_fields) fields[field.name] = (p.stats.*kind.member).*field.member;
      by_pool[p.name] = fields;
    }
    out[kind.name] = by_pool;
  }
  for (const counter& c : counters) out[c.name] = s.*c.member;
  return out;
}

// ---- Where the library is ---------------------------------------------------------------------------

std::string library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&tracepool_default), &info) == 0 || info.dli_fname == nullptr)
    raise_status(TRACEPOOL_ERR_INTERNAL, "dladdr cannot say which file holds tracepool_default");
  char resolved[PATH_MAX];
  return realpath(info.dli_fname, resolved) != nullptr ? resolved : info.dli_fname;
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

// Memory: allocation, statistics, the cache, the devices.
void def_memory(py::module_& m) {
  m.def("library_path", &library_path, "The path of the libtracepool.so this process uses.");
  m.def(
      "configure", [](const std::string& conf) { check(tracepool_configure_default(c_text(conf, "configuration"))); },
      py::arg("conf"), "Configures the default instance (TRACEPOOL_CONF syntax) before its first use.");
  m.def(
      "alloc",
      [](size_t nbytes, int device, uintptr_t stream) {
        void* ptr = nullptr;
        call_default([&](tracepool_t* tp) {
          return tracepool_malloc(tp, nbytes, device, reinterpret_cast<void*>(stream), &ptr);
        });
        return reinterpret_cast<uintptr_t>(ptr);
      },
      py::arg("nbytes"), py::arg("device") = 0, py::arg("stream") = 0,
      "Device memory of at least nbytes bytes from the default instance, as an address (0 for 0 bytes).");
  m.def(
      "free",
      [](uintptr_t ptr, uintptr_t stream) {
        call_default([&](tracepool_t* tp) {
          return tracepool_free(tp, reinterpret_cast<void*>(ptr), reinterpret_cast<void*>(stream));
        });
      },
      py::arg("ptr"), py::arg("stream") = 0, "Returns memory from alloc() to the cache (0 is a no-op).");
  m.def(
      "record_stream",
      [](uintptr_t ptr, uintptr_t stream) {
        call_default([&](tracepool_t* tp) {
          return tracepool_record_stream(tp, reinterpret_cast<void*>(ptr), reinterpret_cast<void*>(stream));
        });
      },
      py::arg("ptr"), py::arg("stream"),
      "The block at ptr is also used on stream: once freed, it is reused elsewhere only after that work.");
  m.def(
      "mem_get_info",
      [](int device) {
        size_t free_bytes = 0, total_bytes = 0;
        call_default([&](tracepool_t* tp) { return tracepool_mem_get_info(tp, device, &free_bytes, &total_bytes); });
        return py::make_tuple(free_bytes, total_bytes);
      },
      py::arg("device"), "(free, total) bytes of the device, as the backend reports them.");
  m.def("stats", &flat_stats, py::arg("device"), "torch.cuda.memory_stats()-style flat statistics of a device.");
  m.def("nested_stats", &nested_stats, py::arg("device"),
        "The statistics in the nested layout of torch._C._cuda_memoryStats().");
  m.def(
      "reset_peak_stats",
      [](int device) { call_default([&](tracepool_t* tp) { return tracepool_reset_peak_stats(tp, device); }); },
      py::arg("device"), "Sets every peak statistic of the device to its current value.");
  m.def(
      "reset_accumulated_stats",
      [](int device) { call_default([&](tracepool_t* tp) { return tracepool_reset_accumulated_stats(tp, device); }); },
      py::arg("device"), "Zeroes the allocated/freed totals and the counters of the device.");
  m.def(
      "empty_cache",
      [](int device) { call_default([&](tracepool_t* tp) { return tracepool_empty_cache(tp, device); }); },
      py::arg("device") = -1, "Gives fully free cached segments back to the device (-1: every device).");
  m.def(
      "device_count",
      [] {
        int count = 0;
        call_default([&](tracepool_t* tp) { return tracepool_device_count(tp, &count); });
        return count;
      },
      "The number of devices the default instance manages.");
  m.def(
      "backend_name",
      [] {
        const char* name = nullptr;
        call_default([&](tracepool_t* tp) {
          name = tracepool_backend_name(tp);
          return TRACEPOOL_OK;
        });
        return std::string(name != nullptr ? name : "");
      },
      "The backend of the default instance: 'cuda' or 'host'.");
}

// Marks, tags and reports.
void def_marks_and_reports(py::module_& m) {
  m.def(
      "mark",
      [](const std::string& label) {
        const char* text = c_text(label, "mark label");
        call_default([&](tracepool_t* tp) { return tracepool_mark(tp, text); });
      },
      py::arg("label"), "Records a named point in time; reports give each site's live bytes at every mark.");
  m.def(
      "auto_mark",
      [](const std::string& label) {
        const char* text = c_text(label, "mark label");
        int taken = 0;
        call_default([&](tracepool_t* tp) { return tracepool_auto_mark(tp, text, &taken); });
        return taken != 0;
      },
      py::arg("label"),
      "A boundary a framework saw, kept as an automatic mark when the spacing allows; True if it was.");
  m.def(
      "tag_push", [](const std::string& label) { check(tracepool_tag_push(c_text(label, "tag label"))); },
      py::arg("label"), "Pushes a tag on the calling thread: sites captured until the matching pop carry it.");
  m.def(
      "tag_pop", [] { check(tracepool_tag_pop()); }, "Pops the calling thread's innermost tag.");
  m.def(
      "report",
      [](const std::string& format, const std::optional<std::string>& reason, int top, bool addresses,
         const py::object& holders) {
        holder_call search{holders, std::nullopt};
        report_options options(&format, reason, top, addresses, &search);
        char* text = nullptr;
        search.call([&] {
          call_default([&](tracepool_t* tp) { return tracepool_report_string_with(tp, &options.c, &text); });
        });
        return take_string(text);
      },
      py::arg("format") = "json", py::arg("reason") = py::none(), py::arg("top") = 0, py::arg("addresses") = false,
      py::arg("holders") = py::none(),
      "The report of the memory held now, as 'json', 'text' or 'html'; reason None: 'demand'; top: sites the text lists "
      "per section (0: 10); addresses: JSON leaks list their live blocks' [address, bytes]; holders: a holder search "
      "(tracepool_holders_fn's, in Python: a list of (address, bytes, leak index) -> JSON str or None).");
  m.def(
      "write_report",
      [](const std::string& path, const std::optional<std::string>& format, const std::optional<std::string>& reason,
         int top, const py::object& holders) {
        const char* where = c_text(path, "path");
        holder_call search{holders, std::nullopt};
        report_options options(format ? &*format : nullptr, reason, top, false, &search);
        search.call([&] {
          call_default([&](tracepool_t* tp) { return tracepool_write_report_with(tp, where, &options.c); });
        });
      },
      py::arg("path"), py::arg("format") = py::none(), py::arg("reason") = py::none(), py::arg("top") = 0,
      py::arg("holders") = py::none(),
      "Writes the report to a file (replaced atomically), 'stderr', a descriptor, a device or a FIFO; format "
      "None: JSON for *.json, HTML for *.html or *.htm, else text.");
  m.def(
      "render_report",
      [](const py::bytes& saved, const std::string& format, int top, const std::optional<std::string>& name) {
        report_options options(&format, std::nullopt, top);
        if (name) options.c.name = c_text(*name, "name");
        const std::string_view json = bytes_of(saved);
        char* text = nullptr;
        call_without_gil([&] { return tracepool_render_report(json.data(), json.size(), &options.c, &text); });
        return take_string(text);
      },
      py::arg("json"), py::arg("format") = "text", py::arg("top") = 0, py::arg("name") = py::none(),
      "Renders a report saved as JSON (bytes) as 'text', 'json' or 'html', with the library's renderer; a text that is "
      "not a report raises InvalidArgumentError naming its first problem (`name` is what the message calls it).");
  m.def(
      "render_html",
      [](const std::vector<py::bytes>& saved, const std::vector<std::string>& names) {
        const saved_reports in(saved, names, "render_html");
        char* page = nullptr;
        // `saved` holds the bytes objects until this returns: read without the GIL.
        call_without_gil([&] {
          return tracepool_render_html(in.texts.size(), in.texts.data(), in.sizes.data(), in.names.data(), &page);
        });
        return take_string(page);
      },
      py::arg("reports"), py::arg("names"),
      "One HTML page of several reports saved as JSON (bytes each; the ranks of one job): a view of each and "
      "of them all merged; `names` are what messages call them.");
  m.def(
      "merge_reports",
      [](const std::vector<py::bytes>& saved, const std::vector<std::string>& names, const std::string& format,
         int top) {
        const saved_reports in(saved, names, "merge_reports");
        report_options options(&format, std::nullopt, top);
        char* view = nullptr;
        call_without_gil([&] {
          return tracepool_merge_reports(in.texts.size(), in.texts.data(), in.sizes.data(), in.names.data(),
                                         &options.c, &view);
        });
        return take_string(view);
      },
      py::arg("reports"), py::arg("names"), py::arg("format") = "text", py::arg("top") = 0,
      "Several reports saved as JSON (bytes each) as one view, as 'text', 'json' (tracepool.merge/1) or 'html'; "
      "`names` are what the view and messages call them.");
  m.def(
      "diff_reports",
      [](const py::bytes& before, const py::bytes& after, const std::vector<std::string>& names,
         const std::string& format, int top) {
        const saved_reports in({before, after}, names, "diff_reports");
        report_options options(&format, std::nullopt, top);
        char* change = nullptr;
        call_without_gil(
            [&] { return tracepool_diff_reports(in.texts.data(), in.sizes.data(), in.names.data(), &options.c, &change); });
        return take_string(change);
      },
      py::arg("before"), py::arg("after"), py::arg("names"), py::arg("format") = "text", py::arg("top") = 0,
      "What changed from one saved report to another (bytes each), as 'text' or 'json' (tracepool.diff/1); "
      "`names` (two) are what the view and messages call them.");
}

// Files: written whole or in place, their paths, names made printable.
void def_files(py::module_& m) {
  m.def(
      "write_file",
      [](const std::string& path, const py::bytes& data) {
        const char* where = c_text(path, "path");
        const std::string_view bytes = bytes_of(data);
        call_without_gil([&] { return tracepool_write_file(where, bytes.data(), bytes.size()); });
      },
      py::arg("path"), py::arg("data"),
      "Writes bytes where a report may go: a new or regular file replaced atomically, a character "
      "device, a FIFO, /dev/stdout, /dev/stderr or /dev/fd/N written straight; anything else refused.");
  m.def(
      "printable",
      [](const py::bytes& text) {
        const std::string_view bytes = bytes_of(text);
        char* shown = nullptr;
        check(tracepool_printable(bytes.data(), bytes.size(), &shown));
        return take_string(shown);  // UTF-8 by construction
      },
      py::arg("text"), "Bytes as the text report shows them (Note [Printable text]): control characters escaped.");
  m.def(
      "write_exit_report", [] { call_without_gil([] { return tracepool_write_exit_report(); }); },
      "Writes the TRACEPOOL_REPORT report now, if due (at most once per process).");
  m.def(
      "check_report_path", [](const std::string& path) { check(tracepool_check_report_path(c_text(path, "path"))); },
      py::arg("path"), "Raises tracepool.Error saying why a report could not be written at `path` now.");
  m.def(
      "write_file_or_fallback",
      [](const std::string& path, const py::bytes& data) {
        const char* where = c_text(path, "path");
        const std::string_view bytes = bytes_of(data);
        char* written = nullptr;
        std::string why;
        call_without_gil([&] {
          const int rc = tracepool_write_file_or_fallback(where, bytes.data(), bytes.size(), &written);
          if (rc == TRACEPOOL_OK && written != nullptr && std::strcmp(written, where) != 0) why = tracepool_last_error();
          return rc;
        });
        std::unique_ptr<char, void (*)(char*)> owned(written, tracepool_string_free);
        return py::make_tuple(py::bytes(owned.get()), py::bytes(why));  // bytes: any file name the OS allows
      },
      py::arg("path"), py::arg("data"),
      "write_file, and where that fails, a new file in the temporary folder: (where it went, why not at `path` "
      "or ''). Raises tracepool.Error when neither could be written.");
  m.def(
      "report_path",
      [](const std::string& path) {
        char* where = nullptr;
        check(tracepool_report_path(c_text(path, "path"), &where));
        std::unique_ptr<char, void (*)(char*)> owned(where, tracepool_string_free);
        return py::bytes(owned.get());  // bytes: any file name the OS allows
      },
      py::arg("path"),
      "Where a report written to `path` now goes: {rank}, {pid} and {host} replaced, and under a launcher of "
      "several ranks '-rank<N>' added before the extension of a path that names neither {rank} nor {pid}.");
  m.def(
      "report_format",
      [](const std::string& path, const std::optional<std::string>& format) {
        const char* chosen = nullptr;
        check(tracepool_report_format(c_text(path, "path"), format ? c_text(*format, "format") : nullptr, &chosen));
        return std::string(chosen);
      },
      py::arg("path"), py::arg("format") = py::none(),
      "The format of a report written to `path`: `format` where given, else by the path's extension, as "
      "write_report picks it.");
}

// The allocation history and PyTorch's history calls.
void def_history(py::module_& m) {
  m.def(
      "record_history",
      [](size_t max_entries, int flags) {
        call_default([&](tracepool_t* tp) { return tracepool_record_history(tp, max_entries, flags); });
      },
      py::arg("max_entries"), py::arg("flags") = 0,
      "Records the allocation history from now on, the newest max_entries events (0: stops and forgets it); "
      "flags as tracepool_record_history's (HISTORY_* here).");
  m.attr("HISTORY_CLEAR") = TRACEPOOL_HISTORY_CLEAR;
  m.attr("HISTORY_NO_ALLOC_SITES") = TRACEPOOL_HISTORY_NO_ALLOC_SITES;
  m.attr("HISTORY_NO_FREE_SITES") = TRACEPOOL_HISTORY_NO_FREE_SITES;
  m.attr("HISTORY_FREEING_SITES") = TRACEPOOL_HISTORY_FREEING_SITES;
  m.def(
      "history_set_metadata",
      [](int device, const std::string& metadata) {
        call_default([&](tracepool_t* tp) { return tracepool_history_set_metadata(tp, device, metadata.c_str()); });
      },
      py::arg("device"), py::arg("metadata"),
      "The user metadata every history event on `device` carries from now on (\"\" none): PyTorch's _set_memory_metadata.");
  m.def(
      "history_metadata",
      [](int device) {
        char* text = nullptr;
        call_default([&](tracepool_t* tp) { return tracepool_history_metadata(tp, device, &text); });
        return take_string(text);
      },
      py::arg("device"), "The user metadata history events on `device` carry now.");
  m.def(
      "history_push_context",
      [](int device, const std::string& context) {
        call_default([&](tracepool_t* tp) { return tracepool_history_push_context(tp, device, context.c_str()); });
      },
      py::arg("device"), py::arg("context"),
      "History events on `device` carry this compile context until it is popped (PyTorch's compiled regions).");
  m.def(
      "history_pop_context",
      [](int device) { call_default([&](tracepool_t* tp) { return tracepool_history_pop_context(tp, device); }); },
      py::arg("device"), "Ends the innermost compile context of `device`.");
  m.def(
      "torch_snapshot_json",
      [] {
        char* text = nullptr;
        call_default([&](tracepool_t* tp) { return tracepool_torch_snapshot_string(tp, &text); });
        return take_string(text);
      },
      "The memory held now, and the allocation history where history:N is on, in the layout of torch.cuda.memory._snapshot(), as JSON.");
}

// Python frames lent to frameless threads (autograd's), and their capture.
void def_python_frames(py::module_& m) {
  m.def(
      "_backward_begin",
      [](int skip) {
        if (python_frames_backward_begin(skip) != 0) throw py::error_already_set();
      },
      py::arg("skip") = 0,
      "Lends the caller's Python frames, less the innermost `skip` (a wrapper's), to frameless threads "
      "(autograd) until _backward_end().");
  m.def(
      "_backward_end",
      [] {
        if (python_frames_backward_end() != 0) throw py::error_already_set();
      },
      "Ends this thread's newest _backward_begin().");
  m.def(
      "_set_python_frames", [](bool enabled) { python_frames_set_enabled(enabled ? 1 : 0); }, py::arg("enabled"),
      "Turns the capture of Python frames on or off for every thread.");
}

}  // namespace

PYBIND11_MODULE(_tracepool, m) {
  m.doc() = "tracepool's C API on the process-wide instance; use the tracepool package instead.";
  make_error_classes(m);
  // This extension's frames (the wrappers below) are tracepool's too: call sites start at the Python
  // line that called them.
  check(tracepool_add_bindings_module(reinterpret_cast<const void*>(&library_path)));
  check(python_frames_install());
  // Before Python finalises, so that no thread reads interpreter state while it is torn down.
  py::module_::import("atexit").attr("register")(py::cpp_function([] { python_frames_shutdown(); }));
  // TRACEPOOL_REPORT from Python's exit, not only C's: after an uncaught KeyboardInterrupt CPython
  // finalises and then kills itself with SIGINT, so C's atexit handlers never run. Registered after
  // the shutdown above so that it runs first (atexit runs the last registered first), while Python
  // frames can still be described; and before finalisation, so what module globals still hold is
  // reported as leaked. The library writes the report once: its own atexit handler then does nothing.
  // A failure is printed by the library, as at a C exit.
  py::module_::import("atexit").attr("register")(py::cpp_function([] {
    PyThreadState* saved = PyEval_SaveThread();  // daemon threads may still allocate meanwhile
    tracepool_write_exit_report();
    PyEval_RestoreThread(saved);
  }));

  def_memory(m);
  def_marks_and_reports(m);
  def_files(m);
  def_history(m);
  def_python_frames(m);
}
