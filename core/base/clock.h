// clock.h: the wall-clock time that reports, marks and the history carry (CLOCK_REALTIME, in ns).
#pragma once

#include <cstdint>
#include <ctime>

namespace tracepool::core {

inline uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace tracepool::core
