// status.h: the result of every fallible core operation, and the thread-local message that explains
// a failure. The numeric values are the C ABI's TRACEPOOL_* codes (capi static_asserts that they match).
#pragma once

#include <cstdarg>

namespace tracepool {

enum class status : int {
  ok = 0,
  invalid_argument = -1,  // null out-pointer, absurd size, malformed call
  out_of_memory = -2,     // the device (or the configured limit) cannot hold the request
  invalid_device = -3,    // device index outside [0, device_count)
  unknown_pointer = -4,   // free of an address tracepool never handed out
  double_free = -5,       // free of an address inside tracepool's memory that is not a live block
  bad_config = -6,        // unknown configuration key or bad value
  backend_error = -7,     // the driver (or host emulation) reported an unexpected error
  unavailable = -8,       // the backend cannot run here (no driver, no device)
  internal = -9,          // a bug or a host allocation failure inside tracepool
};

// Records `fmt` as this thread's last error and returns `s`, so that failure paths read
// `return fail(status::invalid_device, "device %d ...", d);`.
status fail(status s, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// This thread's message for the most recent failure; "" if none. Valid until the next failure on this thread.
const char* last_error();
void clear_last_error();

}  // namespace tracepool
