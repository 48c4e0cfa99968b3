// handle.h: what a tracepool_t is, how a function checks the handle it was given, and the C ABI's one
// way of running a body (every exception becomes a status). For the C API (tracepool.cpp) and the host
// plugins compiled into the same library (plugins/), which reach core through it; never installed.
#pragma once

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "allocator.h"
#include "base/status.h"
#include "handle_registry.h"
#include "report/oom_reporter.h"
#include "tracepool/tracepool.h"

struct tracepool_s {
  std::unique_ptr<tracepool::core::oom_reporter> oom;  // subscribed to impl, so declared first: outlives it
  std::unique_ptr<tracepool::core::allocator> impl;
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

// Every function that takes a handle checks it first: NULL, or an address that is not a live instance
// (destroyed, or never created), is an error naming the function, and is never followed (Note [Live
// handles] in handle_registry.h).
inline status check_handle(const tracepool_t* tp, const char* what) {
  if (tp == nullptr) return fail(status::invalid_argument, "%s: handle is NULL", what);
  if (!live_handles.contains(tp))
    return fail(status::invalid_argument, "%s: handle %p is not a live tracepool (destroyed, or never created)", what,
                static_cast<const void*>(tp));
  return status::ok;
}

// A copy the caller releases with tracepool_string_free.
inline status copy_out(const std::string& text, char** out) {
  char* s = static_cast<char*>(std::malloc(text.size() + 1));
  if (s == nullptr) return fail(status::internal, "host memory exhausted (%zu bytes)", text.size() + 1);
  std::memcpy(s, text.c_str(), text.size() + 1);
  *out = s;
  return status::ok;
}

}  // namespace tracepool::capi
