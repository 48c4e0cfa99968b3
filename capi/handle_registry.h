// handle_registry.h: which tracepool_t handles are live, so that a destroyed or made-up handle gets an
// error instead of being followed (a call after tracepool_destroy, a second destroy).
//
// Note [Live handles]
// A handle is judged by its address alone: the memory behind a stale pointer is never read, since it
// may be freed, or handed by malloc to someone else who wrote anything there. An address that a later
// tracepool_create returns is that new instance's, and live again.
// Every call of the C API checks its handle, tracepool_malloc and tracepool_free included, so a lookup
// takes no lock: a hash and, as a rule, one load (about 2 ns). Adding and removing take a mutex.
// Layout: an open-addressed set of `slots` addresses with linear probing, where 0 is an empty slot and
// 1 a removed one (a tombstone; real handles are heap addresses, never 0 or 1).
// Invariants (they let a lookup run while a handle is added or removed beside it):
//   - between the slot a live handle hashes to and the slot that holds it, no slot is empty: a
//     lookup that meets an empty slot may stop;
//   - a tombstone becomes empty only when the slot after it is empty (so no live handle lies beyond
//     it in a run), and a live handle never moves;
//   - at most `most` handles are live, so an add always finds a free slot.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace tracepool::capi {

class handle_registry {
 public:
  static constexpr size_t most = 1024;  // live instances at once
  static constexpr size_t slots = 4 * most;

  // Lock-free. Whether `handle` is a live instance's.
  bool contains(const void* handle) const noexcept {
    const uintptr_t h = reinterpret_cast<uintptr_t>(handle);
    if (h <= removed) return false;
    for (size_t i = home(h), probes = 0; probes < slots; i = (i + 1) % slots, ++probes) {
      const uintptr_t v = slot_[i].load(std::memory_order_acquire);
      if (v == h) return true;
      if (v == empty) return false;
    }
    return false;
  }
  // False, adding nothing, when `most` instances are live already.
  bool add(const void* handle);
  // False if `handle` was not live: then nothing changed.
  bool remove(const void* handle);
  // Taken by add and remove; Note [Fork] takes it around fork().
  std::mutex& writers() { return writers_; }

 private:
  static constexpr uintptr_t empty = 0, removed = 1;
  // Fibonacci hashing of the address without its alignment bits.
  static size_t home(uintptr_t h) { return static_cast<size_t>(((h >> 4) * 0x9E3779B97F4A7C15ull) >> 52) % slots; }

  std::atomic<uintptr_t> slot_[slots] = {};
  std::mutex writers_;
  size_t live_ = 0;  // under writers_
};
static_assert(handle_registry::slots == 4096, "home() takes the top 12 bits of the hash");

// The process's registry (handle_registry.cpp says why it outlives every static constructor and
// destructor). A variable rather than a function, so that a check inlines into every call.
extern handle_registry live_handles;

}  // namespace tracepool::capi
