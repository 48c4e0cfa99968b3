// reference_plugins.cpp: two PyTorch CUDAPluggableAllocator plugins used only by the GPU check, as
// baselines measured in the same run as tracepool (tests/gpu/run.sh builds this with g++).
//   minimal_alloc / minimal_free: GPU.md's "minimal exact-size caching plugin": freed blocks are kept
//     per exact size and reused for that size only; cudaMalloc otherwise. Shows what the plugin path
//     costs in PyTorch by itself.
//   timed_alloc / timed_free: tracepool_torch_alloc / tracepool_torch_free, timed; timed_ns() and
//     timed_calls() tell how much of a training step is spent inside tracepool.
#include <cuda_runtime.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tracepool/tracepool.h"

namespace {
std::mutex mutex;
std::unordered_map<size_t, std::vector<void*>> free_by_size;
std::unordered_map<void*, size_t> size_of;

std::atomic<uint64_t> ns_inside{0}, calls{0};
uint64_t now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return uint64_t(t.tv_sec) * 1000000000u + uint64_t(t.tv_nsec);
}
}  // namespace

extern "C" {

void* minimal_alloc(size_t size, int, void*) {
  if (size == 0) return nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto& list = free_by_size[size];
    if (!list.empty()) {
      void* p = list.back();
      list.pop_back();
      return p;
    }
  }
  void* p = nullptr;
  if (cudaMalloc(&p, size) != cudaSuccess) return nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  size_of[p] = size;
  return p;
}

void minimal_free(void* p, size_t, int, void*) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex);
  free_by_size[size_of[p]].push_back(p);
}

void* timed_alloc(size_t size, int device, void* stream) {
  const uint64_t t0 = now_ns();
  void* p = tracepool_torch_alloc(size, device, stream);
  ns_inside += now_ns() - t0;
  ++calls;
  return p;
}

void timed_free(void* p, size_t size, int device, void* stream) {
  const uint64_t t0 = now_ns();
  tracepool_torch_free(p, size, device, stream);
  ns_inside += now_ns() - t0;
  ++calls;
}

uint64_t timed_ns(void) { return ns_inside.load(); }
uint64_t timed_calls(void) { return calls.load(); }

}  // extern "C"
