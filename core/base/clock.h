// clock.h: the wall-clock time that reports, marks and the history carry (CLOCK_REALTIME, in ns), a
// coarse monotonic one that spaces automatic marks, and the thread CPU time that says what they cost.
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

// The CPU time the calling thread has used: what a piece of tracepool's own work cost, untouched by the
// thread being preempted in the middle of it (a system call on some kernels: for rare work only).
inline uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// A clock for spacing things out, cheap (vDSO, no system call) and coarse (a few ms).
inline uint64_t monotonic_coarse_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace tracepool::core
