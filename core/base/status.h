// status.h: the result of every fallible core operation, and the thread-local message that explains
// a failure. The enumerators and their values are the rows of tracepool_status_map.h, which also makes
// the C ABI's TRACEPOOL_* codes: status::out_of_memory is TRACEPOOL_ERR_OOM.
#pragma once

#include <cstdarg>

#include "tracepool/tracepool_status_map.h"  // public: capi/include

namespace tracepool {

enum class status : int {
#define TRACEPOOL_STATUS_ENUMERATOR_(name, core_name, code, message, python_class) core_name = (code),
  TRACEPOOL_STATUS_MAP(TRACEPOOL_STATUS_ENUMERATOR_)
#undef TRACEPOOL_STATUS_ENUMERATOR_
};

// Records `fmt` as this thread's last error and returns `s`, so that failure paths read
// `return fail(status::invalid_device, "device %d ...", d);`.
status fail(status s, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// This thread's message for the most recent failure; "" if none. Valid until the next failure on this thread.
const char* last_error();
void clear_last_error();

}  // namespace tracepool
