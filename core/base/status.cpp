#include "base/status.h"

#include <cstdio>

namespace tracepool {
namespace {
thread_local char tls_message[1024];
}

status fail(status s, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(tls_message, sizeof tls_message, fmt, args);
  va_end(args);
  return s;
}

const char* last_error() { return tls_message; }
void clear_last_error() { tls_message[0] = '\0'; }

}  // namespace tracepool
