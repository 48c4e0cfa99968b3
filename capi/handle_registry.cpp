// handle_registry.cpp: adding and removing live handles (Note [Live handles] in handle_registry.h).
#include "handle_registry.h"

#include <type_traits>

namespace tracepool::capi {

// Constant-initialised (its constructor is constexpr) and trivially destructible: no static
// constructor or destructor runs for it, so it serves from the first static constructor that makes an
// instance to the last atexit handler that frees into one.
handle_registry live_handles;
static_assert(std::is_trivially_destructible_v<handle_registry>);

bool handle_registry::add(const void* handle) {
  const uintptr_t h = reinterpret_cast<uintptr_t>(handle);
  std::lock_guard<std::mutex> lock(writers_);
  if (live_ == most) return false;
  size_t i = home(h);
  while (slot_[i].load(std::memory_order_relaxed) > removed) i = (i + 1) % slots;  // a free slot: live_ < slots
  slot_[i].store(h, std::memory_order_release);
  ++live_;
  return true;
}

bool handle_registry::remove(const void* handle) {
  const uintptr_t h = reinterpret_cast<uintptr_t>(handle);
  if (h <= removed) return false;
  std::lock_guard<std::mutex> lock(writers_);
  size_t i = home(h);
  for (size_t probes = 0; slot_[i].load(std::memory_order_relaxed) != h; i = (i + 1) % slots)
    if (slot_[i].load(std::memory_order_relaxed) == empty || ++probes == slots) return false;
  slot_[i].store(removed, std::memory_order_release);
  --live_;
  // Tombstones that end a run become empty again, from the last back: lookups stay short.
  while (slot_[i].load(std::memory_order_relaxed) == removed &&
         slot_[(i + 1) % slots].load(std::memory_order_relaxed) == empty) {
    slot_[i].store(empty, std::memory_order_release);
    i = (i + slots - 1) % slots;
  }
  return true;
}

}  // namespace tracepool::capi
