// context_memory.cpp: what the driver takes without handing it out (Note [Context memory]): contexts, modules
// and the code lazy loading brings in, measured at the calls that make them.
#include <cstdio>

#include "intercept.h"

using namespace tracepool::intercept;

namespace {

// ---- Note [Context memory] ----------------------------------------------------------------------------
// A context and the modules loaded into it take device memory that no allocation entry point hands out:
// about 520 MiB for a context on an H100, more as libraries' kernels load. A call that makes one (a
// context's creation, a module's or library's load) is measured: the device's used bytes before and after
// it (tracepool_mem_get_info: NVML where the process has no context yet, so measuring makes none), and
// what it took is recorded as observed memory at the line that made the call, under the context's or
// module's handle, until its release. The figure is the whole device's, so another process allocating at
// that moment is counted in; growth smaller than the driver's 2 MiB pages shows as nothing. Kernels that
// lazy loading (CUDA_MODULE_LOADING=LAZY, the default) loads at their first launch are measured there (below).
// Lazy loading (the default since CUDA 12.2) loads a kernel's code when it is first used, inside that call:
// its launch (cuLaunchKernel, cuLaunchKernelEx), or a question that needs its code (cuFuncGetAttribute and
// the other cuFunc*, cuKernel* and occupancy calls below: NCCL asks every kernel of its own for its
// attributes as a communicator is made, which loads them all, ~100 MiB on an H100). The first such use of
// each function is measured the same way, with the thread's capture mode relaxed for the measuring (a stream
// being captured must not be invalidated by it), and what it took is recorded under the function's handle
// as "module (lazy load)". Every later use costs a lookup in a table of the functions seen (first_use).
// Enabling peer access to another context maps that device's memory here, and is measured as well ("peer
// access"), until access is disabled again. So is making a stream ("stream (cuStreamCreate)", "stream (with
// priority)"), until it is destroyed: on an H100 the driver takes 2 MiB for some of them (NCCL makes 128 with
// priorities per rank of a two-GPU DDP job as its communicator is made, and 34 of them took 70 MiB, 2 MiB each
// and one 4, by a diagnostic run that measured every driver call).
// Limits: a module's lazily loaded code stays recorded after the module is unloaded or its context destroyed
// (nothing maps a function to its module), and a function that reuses a freed one's address is not measured
// again; the modules of a context are not forgotten with it.

// Whether `device`'s primary context is active (retained by someone); -1 where the driver cannot say.
int primary_active(CUdevice device) {
  const auto state = TRACEPOOL_DRIVER_FUNCTION(cuDevicePrimaryCtxGetState_t*, "cuDevicePrimaryCtxGetState");
  unsigned int flags = 0;
  int active = 0;
  return state != nullptr && state(device, &flags, &active) == CUDA_SUCCESS ? active != 0 : -1;
}

// The device's used bytes, or SIZE_MAX where they cannot be told (the caller records nothing then): the
// driver's own count where this thread's current context is on `device` and can tell, else tracepool's (NVML
// where the process has no context there).
size_t used_on(int device) {
  const auto get_current = TRACEPOOL_DRIVER_FUNCTION(cuCtxGetCurrent_t*, "cuCtxGetCurrent");
  const auto get_device = TRACEPOOL_DRIVER_FUNCTION(cuCtxGetDevice_t*, "cuCtxGetDevice");
  const auto get_info = TRACEPOOL_DRIVER_FUNCTION(cuMemGetInfo_v2_t*, "cuMemGetInfo_v2");
  CUcontext current = nullptr;
  CUdevice on = -1;
  size_t free_bytes = 0, total = 0;
  if (get_current != nullptr && get_device != nullptr && get_info != nullptr && get_current(&current) == CUDA_SUCCESS &&
      current != nullptr && get_device(&on) == CUDA_SUCCESS && on == device) {
    // The CUDA runtime makes the primary context with a context of its own current that cannot answer yet
    // (CUDA_ERROR_CONTEXT_IS_DESTROYED, seen on an H100 with CUDA 13.0): then tracepool answers.
    const CUresult r = get_info(&free_bytes, &total);
    if (logging()) std::fprintf(stderr, "tracepool: intercept: device %d: cuMemGetInfo in context %p: %d\n", device, current, r);
    if (r == CUDA_SUCCESS && free_bytes <= total) return total - free_bytes;
  }
  // The device's primary context is there (another thread's, or this thread's context cannot answer): read it
  // from inside that context, taking and giving back a reference, so that nothing stays retained.
  const auto retain = TRACEPOOL_DRIVER_FUNCTION(cuDevicePrimaryCtxRetain_t*, "cuDevicePrimaryCtxRetain");
  const auto release = TRACEPOOL_DRIVER_FUNCTION(cuDevicePrimaryCtxRelease_v2_t*, "cuDevicePrimaryCtxRelease_v2");
  const auto push = TRACEPOOL_DRIVER_FUNCTION(cuCtxPushCurrent_v2_t*, "cuCtxPushCurrent_v2");
  const auto pop = TRACEPOOL_DRIVER_FUNCTION(cuCtxPopCurrent_v2_t*, "cuCtxPopCurrent_v2");
  CUcontext primary = nullptr;
  if (primary_active(device) == 1 && retain != nullptr && release != nullptr && push != nullptr && pop != nullptr &&
      get_info != nullptr && retain(&primary, device) == CUDA_SUCCESS) {
    CUresult r = push(primary);
    if (r == CUDA_SUCCESS) {
      r = get_info(&free_bytes, &total);
      CUcontext popped = nullptr;
      (void)pop(&popped);
    }
    (void)release(device);
    return r == CUDA_SUCCESS && free_bytes <= total ? total - free_bytes : SIZE_MAX;
  }
  // No context on the device in this process: tracepool asks NVML, which makes none.
  tracepool_t* tp = instance();
  const int rc = tp != nullptr ? tracepool_mem_get_info(tp, device, &free_bytes, &total) : -1;
  if (logging())
    std::fprintf(stderr, "tracepool: intercept: device %d: tracepool_mem_get_info: %d %s\n", device, rc,
                 rc == TRACEPOOL_OK ? "" : tracepool_last_error());
  if (rc != TRACEPOOL_OK || free_bytes > total) return SIZE_MAX;
  return total - free_bytes;
}

// Measures what a call took on one device: made before the call, recorded by took() after it.
struct measure {
  int device = -1;
  size_t before = SIZE_MAX;

  explicit measure(int on) {  // -1: measures nothing
    if (recording || on < 0) return;
    recording = true;
    device = on;
    before = used_on(on);
    recording = false;
  }
  // `current`: a context to make current while measuring (a primary context just made, which nothing has
  // made current yet), so that the driver's own count is read and tracepool retains nothing.
  void took(CUresult r, const void* handle, source_name source, CUcontext current = nullptr) const {
    if (r != CUDA_SUCCESS || handle == nullptr || before == SIZE_MAX || recording) return;
    const auto push = TRACEPOOL_DRIVER_FUNCTION(cuCtxPushCurrent_v2_t*, "cuCtxPushCurrent_v2");
    const auto pop = TRACEPOOL_DRIVER_FUNCTION(cuCtxPopCurrent_v2_t*, "cuCtxPopCurrent_v2");
    recording = true;
    const bool pushed = current != nullptr && push != nullptr && pop != nullptr && push(current) == CUDA_SUCCESS;
    const size_t after = used_on(device);
    CUcontext popped = nullptr;
    if (pushed) (void)pop(&popped);
    recording = false;
    if (logging())
      std::fprintf(stderr, "tracepool: intercept: %s: device %d used %zd bytes before, %zd after\n", source.text, device,
                   static_cast<ssize_t>(before), static_cast<ssize_t>(after));
    if (after != SIZE_MAX && after > before) seen(handle, after - before, device, TRACEPOOL_OBSERVED_DEVICE, source);
  }
};

// Whether `f` is used here for the first time: a lock-free set of the functions seen, 64k slots (512 KiB),
// open addressing. A function that finds its neighbourhood full is treated as seen (not measured).
constexpr size_t launch_slots = size_t{1} << 16;
std::atomic<uintptr_t> launched[launch_slots];

bool first_use(const void* f) {
  const uintptr_t key = reinterpret_cast<uintptr_t>(f);
  if (key == 0) return false;
  size_t i = static_cast<size_t>((key >> 4) * 0x9E3779B97F4A7C15ull >> 48) & (launch_slots - 1);
  for (int probes = 0; probes < 64; ++probes, i = (i + 1) & (launch_slots - 1)) {
    uintptr_t seen = launched[i].load(std::memory_order_relaxed);
    if (seen == key) return false;
    if (seen == 0) {
      if (launched[i].compare_exchange_strong(seen, key, std::memory_order_relaxed)) return true;
      if (seen == key) return false;
    }
  }
  return false;
}

// A call measured (Note [Context memory]): the thread's capture mode relaxed while the device's used bytes are
// read, so that a stream being captured is not invalidated by the reading. `handle()`, after the call, names
// what it made. A thread that is recording passes straight through.
template <class Call, class Handle>
CUresult measured(Call call, Handle handle, source_name source) {
  if (recording) return call();
  const auto exchange = TRACEPOOL_DRIVER_FUNCTION(cuThreadExchangeStreamCaptureMode_t*, "cuThreadExchangeStreamCaptureMode");
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  const bool relaxed = exchange != nullptr && exchange(&mode) == CUDA_SUCCESS;
  const measure m(current_device());
  CUstreamCaptureMode theirs = mode;
  if (relaxed) (void)exchange(&theirs);  // the caller's mode for the call itself
  const CUresult r = call();
  mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (relaxed) (void)exchange(&mode);
  m.took(r, r == CUDA_SUCCESS ? handle() : nullptr, source);
  if (relaxed) (void)exchange(&mode);
  return r;
}

// A function's first use, measured.
template <class Use>
CUresult measured_first_use(const void* f, Use use) {
  if (recording || !first_use(f)) return use();
  return measured(use, [f] {
    gone(f);  // a record left at this address by an unloaded function (Note [Context memory]'s limits)
    return f;
  }, "module (lazy load)");
}

// The primary context of each device that was recorded, so that its last release can forget it.
constexpr int most_devices = 64;
std::atomic<const void*> primary_contexts[most_devices];

}  // namespace

// ---- Contexts and modules (Note [Context memory]) ----------------------------------------------------------


// Only the retain that makes the primary context is measured; later ones (a reference more) take nothing.
TRACEPOOL_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  TRACEPOOL_REAL(cuDevicePrimaryCtxRetain);
  const bool makes = primary_active(device) == 0 && device >= 0 && device < most_devices;
  if (logging()) std::fprintf(stderr, "tracepool: intercept: cuDevicePrimaryCtxRetain(device %d): %s\n", device, makes ? "makes it" : "a reference more");
  const measure m(makes ? device : -1);
  const CUresult r = driver(context, device);
  if (makes && r == CUDA_SUCCESS && context != nullptr) {
    m.took(r, *context, "CUDA context (primary)", *context);
    primary_contexts[device].store(*context);
  }
  return r;
}

// The primary context goes when its last retain is released: then what it took is gone.
TRACEPOOL_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  TRACEPOOL_REAL(cuDevicePrimaryCtxRelease_v2);
  const CUresult r = driver(device);
  if (r == CUDA_SUCCESS && device >= 0 && device < most_devices && primary_active(device) == 0)
    gone(primary_contexts[device].exchange(nullptr));
  return r;
}

// cudaDeviceReset: the primary context goes whatever its references.
TRACEPOOL_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice device) {
  TRACEPOOL_REAL(cuDevicePrimaryCtxReset_v2);
  if (device >= 0 && device < most_devices) gone(primary_contexts[device].exchange(nullptr));
  return driver(device);
}

TRACEPOOL_EXPORT CUresult cuCtxCreate_v2(CUcontext* context, unsigned int flags, CUdevice device) {
  TRACEPOOL_REAL(cuCtxCreate_v2);
  const measure m(device);
  const CUresult r = driver(context, flags, device);
  if (r == CUDA_SUCCESS && context != nullptr) m.took(r, *context, "CUDA context (cuCtxCreate)");
  return r;
}

TRACEPOOL_EXPORT CUresult cuCtxCreate_v4(CUcontext* context, CUctxCreateParams* params, unsigned int flags, CUdevice device) {
  TRACEPOOL_REAL(cuCtxCreate_v4);
  const measure m(device);
  const CUresult r = driver(context, params, flags, device);
  if (r == CUDA_SUCCESS && context != nullptr) m.took(r, *context, "CUDA context (cuCtxCreate)");
  return r;
}

TRACEPOOL_EXPORT CUresult cuCtxDestroy_v2(CUcontext context) {
  TRACEPOOL_REAL(cuCtxDestroy_v2);
  gone(context);
  return driver(context);
}

#define TRACEPOOL_LOAD(name, handle, ...)             \
  TRACEPOOL_REAL(name);                               \
  const measure m(current_device());                  \
  const CUresult r = driver(handle, __VA_ARGS__);     \
  if (r == CUDA_SUCCESS && handle != nullptr) m.took(r, *handle, "module (" #name ")"); \
  return r

TRACEPOOL_EXPORT CUresult cuModuleLoad(CUmodule* module, const char* path) { TRACEPOOL_LOAD(cuModuleLoad, module, path); }

TRACEPOOL_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  TRACEPOOL_LOAD(cuModuleLoadData, module, image);
}

TRACEPOOL_EXPORT CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int count, CUjit_option* options,
                                             void** values) {
  TRACEPOOL_LOAD(cuModuleLoadDataEx, module, image, count, options, values);
}

TRACEPOOL_EXPORT CUresult cuModuleLoadFatBinary(CUmodule* module, const void* image) {
  TRACEPOOL_LOAD(cuModuleLoadFatBinary, module, image);
}

TRACEPOOL_EXPORT CUresult cuModuleUnload(CUmodule module) {
  TRACEPOOL_REAL(cuModuleUnload);
  gone(module);
  return driver(module);
}

TRACEPOOL_EXPORT CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jit_options,
                                            void** jit_values, unsigned int jit_count, CUlibraryOption* options,
                                            void** values, unsigned int count) {
  TRACEPOOL_LOAD(cuLibraryLoadData, library, code, jit_options, jit_values, jit_count, options, values, count);
}

TRACEPOOL_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* path, CUjit_option* jit_options,
                                                void** jit_values, unsigned int jit_count, CUlibraryOption* options,
                                                void** values, unsigned int count) {
  TRACEPOOL_LOAD(cuLibraryLoadFromFile, library, path, jit_options, jit_values, jit_count, options, values, count);
}

TRACEPOOL_EXPORT CUresult cuLibraryUnload(CUlibrary library) {
  TRACEPOOL_REAL(cuLibraryUnload);
  gone(library);
  return driver(library);
}

// ---- First uses of a function (Note [Context memory]: lazy loading) -----------------------------------------

TRACEPOOL_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                                         unsigned int block_x, unsigned int block_y, unsigned int block_z,
                                         unsigned int shared, CUstream stream, void** params, void** extra) {
  TRACEPOOL_REAL(cuLaunchKernel);
  return measured_first_use(f, [&] {
    return driver(f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared, stream, params, extra);
  });
}

TRACEPOOL_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                                              unsigned int block_x, unsigned int block_y, unsigned int block_z,
                                              unsigned int shared, CUstream stream, void** params, void** extra) {
  TRACEPOOL_REAL(cuLaunchKernel_ptsz);
  return measured_first_use(f, [&] {
    return driver(f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared, stream, params, extra);
  });
}

TRACEPOOL_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  TRACEPOOL_REAL(cuLaunchKernelEx);
  return measured_first_use(f, [&] { return driver(config, f, params, extra); });
}

TRACEPOOL_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  TRACEPOOL_REAL(cuLaunchKernelEx_ptsz);
  return measured_first_use(f, [&] { return driver(config, f, params, extra); });
}

TRACEPOOL_EXPORT CUresult cuFuncGetAttribute(int* value, CUfunction_attribute attribute, CUfunction f) {
  TRACEPOOL_REAL(cuFuncGetAttribute);
  return measured_first_use(f, [&] { return driver(value, attribute, f); });
}

TRACEPOOL_EXPORT CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attribute, int value) {
  TRACEPOOL_REAL(cuFuncSetAttribute);
  return measured_first_use(f, [&] { return driver(f, attribute, value); });
}

TRACEPOOL_EXPORT CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache config) {
  TRACEPOOL_REAL(cuFuncSetCacheConfig);
  return measured_first_use(f, [&] { return driver(f, config); });
}

TRACEPOOL_EXPORT CUresult cuFuncLoad(CUfunction f) {
  TRACEPOOL_REAL(cuFuncLoad);
  return measured_first_use(f, [&] { return driver(f); });
}

TRACEPOOL_EXPORT CUresult cuKernelGetFunction(CUfunction* f, CUkernel kernel) {
  TRACEPOOL_REAL(cuKernelGetFunction);
  return measured_first_use(kernel, [&] { return driver(f, kernel); });
}

TRACEPOOL_EXPORT CUresult cuKernelGetAttribute(int* value, CUfunction_attribute attribute, CUkernel kernel, CUdevice device) {
  TRACEPOOL_REAL(cuKernelGetAttribute);
  return measured_first_use(kernel, [&] { return driver(value, attribute, kernel, device); });
}

TRACEPOOL_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attribute, int value, CUkernel kernel, CUdevice device) {
  TRACEPOOL_REAL(cuKernelSetAttribute);
  return measured_first_use(kernel, [&] { return driver(attribute, value, kernel, device); });
}

TRACEPOOL_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction f, int block_size,
                                                                      size_t shared) {
  TRACEPOOL_REAL(cuOccupancyMaxActiveBlocksPerMultiprocessor);
  return measured_first_use(f, [&] { return driver(blocks, f, block_size, shared); });
}

TRACEPOOL_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, CUfunction f, int block_size,
                                                                               size_t shared, unsigned int flags) {
  TRACEPOOL_REAL(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags);
  return measured_first_use(f, [&] { return driver(blocks, f, block_size, shared, flags); });
}

// ---- Peer access (Note [Context memory]) -------------------------------------------------------------------
// Recorded under the peer context's handle, one byte further per device of the current context (contexts are
// 16-byte aligned, so devices 0 to 14 each get their own key, apart from the context's own record); access
// enabled from a device beyond those is not measured.

namespace {
const void* peer_key(CUcontext peer, int device) {
  return device >= 0 && device < 15 && peer != nullptr ? reinterpret_cast<const char*>(peer) + 1 + device : nullptr;
}
}  // namespace

TRACEPOOL_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  TRACEPOOL_REAL(cuCtxEnablePeerAccess);
  const int device = current_device();
  const void* key = peer_key(peer, device);
  const measure m(key != nullptr ? device : -1);
  const CUresult r = driver(peer, flags);
  m.took(r, key, "peer access");
  return r;
}

TRACEPOOL_EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peer) {
  TRACEPOOL_REAL(cuCtxDisablePeerAccess);
  if (const void* key = peer_key(peer, current_device())) gone(key);
  return driver(peer);
}

// ---- Streams (Note [Context memory]) ------------------------------------------------------------------------

namespace {
// A stream's making, measured and recorded under its handle.
template <class Create>
CUresult measured_stream(CUstream* stream, Create create, source_name source) {
  return measured(create, [stream] { return stream != nullptr ? *stream : nullptr; }, source);
}
}  // namespace

TRACEPOOL_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  TRACEPOOL_REAL(cuStreamCreate);
  return measured_stream(stream, [&] { return driver(stream, flags); }, "stream (cuStreamCreate)");
}

TRACEPOOL_EXPORT CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int priority) {
  TRACEPOOL_REAL(cuStreamCreateWithPriority);
  return measured_stream(stream, [&] { return driver(stream, flags, priority); }, "stream (with priority)");
}

TRACEPOOL_EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  TRACEPOOL_REAL(cuStreamDestroy_v2);
  gone(stream);
  return driver(stream);
}
