// torch_profiling.h: what tracepool's PyTorch allocator class tells torch.profiler (Note [Memory
// profiling] in torch_profiling.cpp).
#pragma once

#include <c10/core/Device.h>

#include <cstddef>
#include <utility>

namespace tracepool::torch_plugin {

// An allocation made while a profiler asks (c10::memoryProfilingEnabled()): told now, and listed so
// that its free is told too.
void profile_alloc(void* ptr, size_t size, c10::DeviceIndex device);
// Whether `ptr` was told at its allocation; if so, its size and device, and it leaves the list. One
// relaxed load while the list is empty.
bool take_profiled(void* ptr, std::pair<size_t, c10::DeviceIndex>* out);
// After the free: the figures the profiler gets are those without the block, as PyTorch's.
void profile_free(void* ptr, size_t size, c10::DeviceIndex device);

}  // namespace tracepool::torch_plugin
