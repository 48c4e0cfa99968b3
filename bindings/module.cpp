// module.cpp: tracepool._tracepool, the extension behind the Python package. Thin wrappers over the C
// API of the process-wide instance (tracepool_default()), with every failure status raised as a
// tracepool.Error; importing it registers the CPython frame provider (python_frames.c). This file holds
// memory, statistics, the history and Python frames; reports.cpp marks, reports and files; glue.h what
// they share.
//
// The extension links libtracepool.so, the same file that tracepool.library_path() names and that
// PyTorch loads with ctypes, so the process has one allocator whichever door a caller comes in by.
#include "glue.h"

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

namespace {

using namespace tracepool_py;

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
      "observe_alloc",
      [](uintptr_t ptr, size_t nbytes, int device, const std::string& kind, const std::string& source) {
        const int k = kind == "device" ? TRACEPOOL_OBSERVED_DEVICE
                      : kind == "managed" ? TRACEPOOL_OBSERVED_MANAGED
                      : kind == "host"    ? TRACEPOOL_OBSERVED_HOST
                                          : -1;
        if (k < 0) raise_status(TRACEPOOL_ERR_INVALID_ARGUMENT, "observe_alloc: kind must be 'device', 'managed' or 'host'");
        const char* name = c_text(source, "source");
        call_default([&](tracepool_t* tp) {
          return tracepool_observe_alloc(tp, reinterpret_cast<const void*>(ptr), nbytes, device, k, name);
        });
      },
      py::arg("ptr"), py::arg("nbytes"), py::arg("device") = 0, py::arg("kind") = "device", py::kw_only(),
      py::arg("source"),
      "Tells tracepool of memory got outside its pool (the driver, a runtime's own allocator): recorded at this "
      "line, listed in reports tagged 'outside the pool: SOURCE', never served or freed by tracepool.");
  m.def(
      "observe_free",
      [](uintptr_t ptr) {
        call_default([&](tracepool_t* tp) { return tracepool_observe_free(tp, reinterpret_cast<const void*>(ptr)); });
      },
      py::arg("ptr"), "The release of memory told to observe_alloc (0 is a no-op).");
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
