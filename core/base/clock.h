// clock.h: the wall-clock time that reports, marks and the history carry (CLOCK_REALTIME, in ns), and
// a coarse monotonic one that spaces automatic marks.
#pragma once

#include <cstdint>
#include <ctime>

namespace tracepool::core {

inline uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// A clock for timing what tracepool's own work costs.
inline uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// A clock for spacing things out, cheap (vDSO, no system call) and coarse (a few ms).
inline uint64_t monotonic_coarse_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace tracepool::core
