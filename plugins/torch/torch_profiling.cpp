// torch_profiling.cpp: torch.profiler's memory events from tracepool's PyTorch allocator class.
//
// Note [Memory profiling]
// torch.profiler.profile(profile_memory=True) learns of every allocation and free from the allocator
// (c10::reportMemoryUsageToProfiler, with the device's allocated and reserved bytes), as PyTorch's
// own allocator tells it. Only while a profiler asks (c10::memoryProfilingEnabled(), one thread-local
// read, as PyTorch's allocator pays too): the blocks allocated meanwhile are listed with their size and
// device, so that their frees can be told; the list is read at a free only while it has any.
#include "torch_profiling.h"

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "tracepool/tracepool.h"

namespace tracepool::torch_plugin {

namespace {

std::mutex profiled_mutex;
std::unordered_map<void*, std::pair<size_t, c10::DeviceIndex>> profiled;  // guarded by profiled_mutex
std::atomic<size_t> profiled_count{0};

void report_to_profiler(void* ptr, int64_t bytes, c10::DeviceIndex device) {
  tracepool_stats_t s{};
  s.size = sizeof s;
  if (tracepool_t* tp = tracepool_default(); tp == nullptr || tracepool_get_stats(tp, device, &s) != TRACEPOOL_OK) return;
  c10::reportMemoryUsageToProfiler(ptr, bytes, s.allocated_bytes.current, s.reserved_bytes.current,
                                   c10::Device(c10::DeviceType::CUDA, device));
}

}  // namespace

void profile_alloc(void* ptr, size_t size, c10::DeviceIndex device) {
  {
    std::lock_guard<std::mutex> lock(profiled_mutex);
    profiled[ptr] = {size, device};
    profiled_count.store(profiled.size(), std::memory_order_relaxed);
  }
  report_to_profiler(ptr, static_cast<int64_t>(size), device);
}

bool take_profiled(void* ptr, std::pair<size_t, c10::DeviceIndex>* out) {
  if (profiled_count.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard<std::mutex> lock(profiled_mutex);
  auto it = profiled.find(ptr);
  if (it == profiled.end()) return false;
  *out = it->second;
  profiled.erase(it);
  profiled_count.store(profiled.size(), std::memory_order_relaxed);
  return true;
}

void profile_free(void* ptr, size_t size, c10::DeviceIndex device) {
  report_to_profiler(ptr, -static_cast<int64_t>(size), device);
}

}  // namespace tracepool::torch_plugin
