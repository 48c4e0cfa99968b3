// intercept.h: what the interposer's parts share (Note [Interposer] in intercept.cpp). Internal to
// libtracepool_intercept.so.
#pragma once

#include <atomic>
#include <cstdint>

#include "backend/cuda_abi.h"
#include "tracepool/tracepool.h"

// The driver's functions we wrap, by the exact name each is exported under, with what it allocates.
#define TRACEPOOL_INTERCEPTED(X)   \
  X(cuGetProcAddress)              \
  X(cuGetProcAddress_v2)           \
  X(cuMemAlloc_v2)                 \
  X(cuMemAllocPitch_v2)            \
  X(cuMemAllocManaged)             \
  X(cuMemFree_v2)                  \
  X(cuMemAllocAsync)               \
  X(cuMemAllocAsync_ptsz)          \
  X(cuMemAllocFromPoolAsync)       \
  X(cuMemAllocFromPoolAsync_ptsz)  \
  X(cuMemFreeAsync)                \
  X(cuMemFreeAsync_ptsz)           \
  X(cuMemHostAlloc)                \
  X(cuMemAllocHost_v2)             \
  X(cuMemFreeHost)                 \
  X(cuMemCreate)                   \
  X(cuMemRelease)                  \
  X(cuDevicePrimaryCtxRetain)      \
  X(cuDevicePrimaryCtxRelease_v2)  \
  X(cuDevicePrimaryCtxReset_v2)    \
  X(cuCtxCreate_v2)                \
  X(cuCtxCreate_v4)                \
  X(cuCtxDestroy_v2)               \
  X(cuModuleLoad)                  \
  X(cuModuleLoadData)              \
  X(cuModuleLoadDataEx)            \
  X(cuModuleLoadFatBinary)         \
  X(cuModuleUnload)                \
  X(cuLibraryLoadData)             \
  X(cuLibraryLoadFromFile)         \
  X(cuLibraryUnload)               \
  X(cuLaunchKernel)                \
  X(cuLaunchKernel_ptsz)           \
  X(cuLaunchKernelEx)              \
  X(cuLaunchKernelEx_ptsz)         \
  X(cuFuncGetAttribute)            \
  X(cuFuncSetAttribute)            \
  X(cuFuncSetCacheConfig)          \
  X(cuFuncLoad)                    \
  X(cuKernelGetFunction)           \
  X(cuKernelGetAttribute)          \
  X(cuKernelSetAttribute)          \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor) \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags) \
  X(cuCtxEnablePeerAccess)         \
  X(cuCtxDisablePeerAccess)         \
  X(cuStreamCreate)                \
  X(cuStreamCreateWithPriority)    \
  X(cuStreamDestroy_v2)

#define TRACEPOOL_EXPORT extern "C" __attribute__((visibility("default")))

// Our definitions, declared first (with the driver's types, core/backend/cuda_abi.h) so that the table in
// intercept.cpp can name them; a definition that strays from its type does not compile.
#define TRACEPOOL_DECLARE_WRAPPER(name) TRACEPOOL_EXPORT name##_t name;
TRACEPOOL_INTERCEPTED(TRACEPOOL_DECLARE_WRAPPER)
#undef TRACEPOOL_DECLARE_WRAPPER

namespace tracepool::intercept {

enum entry : int {
#define TRACEPOOL_ENTRY_ID(name) e_##name,
  TRACEPOOL_INTERCEPTED(TRACEPOOL_ENTRY_ID)
#undef TRACEPOOL_ENTRY_ID
  entry_count
};

// The driver's own function behind wrapper `e`, or nullptr where the driver lacks it.
void* real_function(entry e);
template <class F>
F real(entry e) {
  return reinterpret_cast<F>(real_function(e));
}

// Values found once. Never a function-local static initialised by a call: its guard would be held across
// dlopen, dladdr or dlsym, which take the loader's lock, and a thread inside dlopen whose library's constructor
// reaches the interposer would wait for the guard while its holder waits for the loader. Threads that race
// here find the same value twice. `none` stands for "looked for, not there".
inline char none_object;
inline void* const none = &none_object;

template <class Find>
void* found_once(std::atomic<void*>* slot, Find find) {
  void* p = slot->load(std::memory_order_acquire);
  if (p == nullptr) {
    p = find();
    if (p == nullptr) p = none;
    slot->store(p, std::memory_order_release);
  }
  return p == none ? nullptr : p;
}

// `name` in libcuda.so.1 (loaded if need be), or nullptr.
void* driver_symbol(const char* name);

// A driver function the interposer calls itself (the driver's own, never a wrapper), found once.
#define TRACEPOOL_DRIVER_FUNCTION(type, name)                                             \
  ([]() -> type {                                                                          \
    static std::atomic<void*> slot{nullptr};                                               \
    return reinterpret_cast<type>(found_once(&slot, [] { return driver_symbol(name); })); \
  }())

// ---- Recording (intercept.cpp) ------------------------------------------------------------------------

// This thread is inside tracepool, recording: its driver calls and thread starts pass straight through.
extern __attribute__((tls_model("initial-exec"))) thread_local bool recording;

// The default instance once the interposer has recorded into it, else nullptr (this never makes it: a
// process that never reaches the driver, such as a compiler run under `run --intercept -- make`, gets none).
tracepool_t* recorded_instance();

// TRACEPOOL_INTERCEPT_LOG=1: whether each lookup, record and measurement is told on stderr.
bool logging();
// One line on stderr, the first time `what` happens in this process.
void say_once(std::atomic<bool>* said, const char* what, const char* detail);
// The default instance (made on first use), or nullptr with one line saying why.
tracepool_t* instance();
// The current context's device (0 where the driver cannot tell).
int current_device();
// Who took memory, as tracepool_observe_alloc names it: a literal of 1 to 32 bytes, checked where it is written.
// (The library refuses a longer one at run time, and that memory would go unrecorded, said only under
// TRACEPOOL_INTERCEPT_LOG: NCCL's priority streams once did.)
struct source_name {
  template <size_t N>
  constexpr source_name(const char (&literal)[N]) : text(literal) {  // NOLINT: implicit, from literals only
    static_assert(N >= 2 && N - 1 <= 32, "tracepool_observe_alloc takes sources of 1 to 32 bytes");
  }
  const char* text;
};
// Records `size` bytes at `ptr` (observed memory of `kind`, tagged `source`) at the caller's line.
void seen(const void* ptr, size_t size, int device, int kind, source_name source);
// The driver refused `size` bytes for want of memory: tracepool's out-of-memory report.
void refused(size_t size, int device, source_name source);
// A device allocation's outcome: recorded when made, an out-of-memory report when refused for want of memory.
void seen_device(CUresult r, const CUdeviceptr* ptr, size_t size, int kind, source_name source);
// Forgets what was recorded at `ptr`, before the driver takes it back.
void gone(const void* ptr);

inline const void* as_pointer(CUdeviceptr p) { return reinterpret_cast<const void*>(static_cast<uintptr_t>(p)); }

}  // namespace tracepool::intercept

// The driver's function behind the wrapper `name`, as `driver`; CUDA_ERROR_NOT_FOUND where there is none.
#define TRACEPOOL_REAL(name)                                                        \
  const auto driver = tracepool::intercept::real<decltype(&::name)>(tracepool::intercept::e_##name); \
  if (driver == nullptr) return CUDA_ERROR_NOT_FOUND
