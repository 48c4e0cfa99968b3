// api_model.h: what the fuzzer believes an instance holds, and the checks that compare it with what
// the instance says (tracepool_get_stats, tracepool_mem_get_info, tracepool_validate).
//
// Invariants of the model (every thread of an input shares one):
//  - `live` holds every block tracepool has handed out and not yet been asked to free, by address:
//    a block is inserted after tracepool_malloc returns and erased before tracepool_free is called,
//    so two entries that overlap are two live blocks that overlap, a bug in tracepool.
//  - count[d] and requested[d] are the number and requested bytes of the entries on device d.
//  - `handout` is held shared around every malloc and every free of a live block (with its model
//    update), and exclusively by a free or record_stream of a stale pointer: while it is held
//    exclusively, an address absent from `live` is not a live block of tracepool's either.
#pragma once

#include <tracepool/tracepool.h>

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <shared_mutex>

namespace fuzz {

inline constexpr int device_count = 2;  // host_devices:2

// Prints what differed and stops the process where libFuzzer (or the replay driver) notices.
[[noreturn]] inline void failed(const char* where, const char* format, ...) {
  std::fprintf(stderr, "api_fuzzer: CHECK FAILED (%s): ", where);
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fprintf(stderr, "\napi_fuzzer: tracepool_last_error() on this thread: %s\n", tracepool_last_error());
  std::fflush(stderr);
  __builtin_trap();
}

struct live_block {
  size_t size;
  int device;
  uint64_t canary;  // written at the block's start (and its last byte) when it was handed out
};

struct model {
  size_t capacity = 0;  // host_capacity of every device
  bool one_thread = true;

  std::shared_mutex handout;
  std::mutex mutex;  // guards what follows
  std::map<uintptr_t, live_block> live;
  uint64_t count[device_count] = {};
  uint64_t requested[device_count] = {};
  // Since the last reset_accumulated of the device (checked with one thread, or when none ran).
  uint64_t count_base[device_count] = {};
  uint64_t requested_base[device_count] = {};
  uint64_t ooms[device_count] = {};
  size_t limit[device_count] = {};
  bool accumulated_reset = false;

  std::atomic<uint64_t> invalid_frees{0};  // frees answered UNKNOWN_POINTER or DOUBLE_FREE
  std::atomic<bool> oom_seen{false};
  std::atomic<int> reports{0};

  // Records a block just handed out; fails if it overlaps a live one.
  void insert(const char* where, uintptr_t p, size_t size, int device, uint64_t canary) {
    std::lock_guard<std::mutex> lock(mutex);
    auto next = live.lower_bound(p);
    if (next != live.end() && next->first < p + size)
      failed(where, "block [%#zx, +%zu) overlaps live block [%#zx, +%zu)", static_cast<size_t>(p), size,
             static_cast<size_t>(next->first), next->second.size);
    if (next != live.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second.size > p)
        failed(where, "block [%#zx, +%zu) overlaps live block [%#zx, +%zu)", static_cast<size_t>(p), size,
               static_cast<size_t>(prev->first), prev->second.size);
    }
    live.emplace(p, live_block{size, device, canary});
    count[device] += 1;
    requested[device] += size;
  }

  // Removes a block about to be freed.
  live_block erase(uintptr_t p) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = live.find(p);
    const live_block b = it->second;
    live.erase(it);
    count[b.device] -= 1;
    requested[b.device] -= b.size;
    return b;
  }

  bool is_live(uintptr_t p) {
    std::lock_guard<std::mutex> lock(mutex);
    return live.count(p) != 0;
  }
};

inline tracepool_stats_t stats_of(tracepool_t* tp, int device, const char* where) {
  tracepool_stats_t s{};
  s.size = sizeof s;
  if (int rc = tracepool_get_stats(tp, device, &s); rc != TRACEPOOL_OK) failed(where, "get_stats(%d) = %d", device, rc);
  return s;
}

#define FUZZ_EXPECT(cond, ...)                       \
  do {                                               \
    if (!(cond)) ::fuzz::failed(where, __VA_ARGS__); \
  } while (0)

// Relations that hold whatever the model knows: peaks at least currents, pools adding up. get_stats
// reads the pools, then the segments: `quiescent` (no other thread at work) lets it compare the two.
inline void check_stats_shape(const tracepool_stats_t& s, int d, bool quiescent, const char* where) {
  const tracepool_stat_t* all = &s.allocation;
  const tracepool_stat_t* small = &s.small_pool.allocation;
  const tracepool_stat_t* large = &s.large_pool.allocation;
  for (int k = 0; k < 9; ++k) {
    FUZZ_EXPECT(all[k].peak >= all[k].current, "device %d stat %d: peak %llu < current %llu", d, k,
                (unsigned long long)all[k].peak, (unsigned long long)all[k].current);
    FUZZ_EXPECT(small[k].current + large[k].current == all[k].current,
                "device %d stat %d: small %llu + large %llu != all %llu", d, k, (unsigned long long)small[k].current,
                (unsigned long long)large[k].current, (unsigned long long)all[k].current);
  }
  FUZZ_EXPECT(s.allocated_bytes.current >= s.requested_bytes.current, "device %d: allocated %llu < requested %llu", d,
              (unsigned long long)s.allocated_bytes.current, (unsigned long long)s.requested_bytes.current);
  FUZZ_EXPECT(s.allocated_bytes.current >= 256 * s.allocation.current, "device %d: %llu blocks in %llu bytes", d,
              (unsigned long long)s.allocation.current, (unsigned long long)s.allocated_bytes.current);
  FUZZ_EXPECT(!quiescent || s.reserved_bytes.current >= s.allocated_bytes.current,
              "device %d: reserved %llu < allocated %llu", d, (unsigned long long)s.reserved_bytes.current,
              (unsigned long long)s.allocated_bytes.current);
  FUZZ_EXPECT(s.active.current >= s.allocation.current && s.active_bytes.current >= s.allocated_bytes.current,
              "device %d: fewer active blocks or bytes than allocated", d);
}

// Everything the model knows exactly, when no other thread is running. `exact_accumulated`: no
// reset_accumulated raced an allocation, so allocated - freed and num_ooms are known.
inline void check_exact(tracepool_t* tp, model& m, bool exact_accumulated, bool exact_limit, const char* where) {
  if (int rc = tracepool_validate(tp); rc != TRACEPOOL_OK) failed(where, "validate = %d", rc);
  uint64_t invalid = 0;
  for (int d = 0; d < device_count; ++d) {
    const tracepool_stats_t s = stats_of(tp, d, where);
    check_stats_shape(s, d, true, where);
    FUZZ_EXPECT(s.allocation.current == m.count[d], "device %d: allocation.current %llu, model %llu live blocks", d,
                (unsigned long long)s.allocation.current, (unsigned long long)m.count[d]);
    FUZZ_EXPECT(s.requested_bytes.current == m.requested[d], "device %d: requested_bytes.current %llu, model %llu", d,
                (unsigned long long)s.requested_bytes.current, (unsigned long long)m.requested[d]);
    if (exact_accumulated) {
      FUZZ_EXPECT(s.allocation.allocated - s.allocation.freed == m.count[d] - m.count_base[d],
                  "device %d: allocation allocated %llu - freed %llu, model %llu - %llu", d,
                  (unsigned long long)s.allocation.allocated, (unsigned long long)s.allocation.freed,
                  (unsigned long long)m.count[d], (unsigned long long)m.count_base[d]);
      FUZZ_EXPECT(s.requested_bytes.allocated - s.requested_bytes.freed == m.requested[d] - m.requested_base[d],
                  "device %d: requested_bytes allocated - freed disagrees with the model", d);
      FUZZ_EXPECT(s.num_ooms == m.ooms[d], "device %d: num_ooms %llu, model %llu", d, (unsigned long long)s.num_ooms,
                  (unsigned long long)m.ooms[d]);
      // Every OOM retried once after emptying the cache (a reset between the two may split them).
      FUZZ_EXPECT(s.num_alloc_retries >= s.num_ooms, "device %d: %llu OOMs but %llu retries", d,
                  (unsigned long long)s.num_ooms, (unsigned long long)s.num_alloc_retries);
    }
    if (exact_limit)
      FUZZ_EXPECT(s.limit_bytes == m.limit[d], "device %d: limit_bytes %llu, model %zu", d,
                  (unsigned long long)s.limit_bytes, m.limit[d]);
    size_t free_bytes = 0, total_bytes = 0;
    if (int rc = tracepool_mem_get_info(tp, d, &free_bytes, &total_bytes); rc != TRACEPOOL_OK)
      failed(where, "mem_get_info(%d) = %d", d, rc);
    FUZZ_EXPECT(total_bytes == m.capacity, "device %d: total %zu, capacity %zu", d, total_bytes, m.capacity);
    // The host backend's memory in use is exactly the segments tracepool holds.
    FUZZ_EXPECT(total_bytes - free_bytes == s.reserved_bytes.current,
                "device %d: the backend has %zu bytes in use, reserved_bytes.current is %llu", d,
                total_bytes - free_bytes, (unsigned long long)s.reserved_bytes.current);
    invalid += s.num_invalid_frees;
  }
  FUZZ_EXPECT(invalid == m.invalid_frees.load(), "num_invalid_frees add up to %llu, model %llu",
              (unsigned long long)invalid, (unsigned long long)m.invalid_frees.load());
}

}  // namespace fuzz
