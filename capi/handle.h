// handle.h: what a tracepool_t is, and the C ABI's one way of running a body (every exception
// becomes a status). For the C API (tracepool.cpp) and the host plugins compiled into the same
// library (plugins/), which reach core through it; never installed.
#pragma once

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "allocator.h"
#include "base/status.h"
#include "report/oom_reporter.h"
#include "tracepool/tracepool.h"

struct tracepool_s {
  std::unique_ptr<tracepool::core::oom_reporter> oom;  // subscribed to impl, so declared first: outlives it
  std::unique_ptr<tracepool::core::allocator> impl;
  bool is_default = false;
};

namespace tracepool::capi {

inline int code(status s) { return static_cast<int>(s); }

// Runs `body` (returning a status) with every exception turned into TRACEPOOL_ERR_INTERNAL.
template <typename Body>
int guarded(const char* what, Body&& body) noexcept {
  try {
    return code(body());
  } catch (const std::bad_alloc&) {
    return code(fail(status::internal, "%s: host memory exhausted", what));
  } catch (const std::exception& e) {
    return code(fail(status::internal, "%s: %s", what, e.what()));
  } catch (...) {
    return code(fail(status::internal, "%s: unknown exception", what));
  }
}

inline status null_handle(const char* what) { return fail(status::invalid_argument, "%s: handle is NULL", what); }

// A copy the caller releases with tracepool_string_free.
inline status copy_out(const std::string& text, char** out) {
  char* s = static_cast<char*>(std::malloc(text.size() + 1));
  if (s == nullptr) return fail(status::internal, "host memory exhausted (%zu bytes)", text.size() + 1);
  std::memcpy(s, text.c_str(), text.size() + 1);
  *out = s;
  return status::ok;
}

}  // namespace tracepool::capi
