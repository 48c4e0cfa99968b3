// intercept.cpp: libtracepool_intercept.so, the interposer (Note [Interposer]). It has no public header: a
// process loads it with LD_PRELOAD (python -m tracepool run --intercept), and it exports only dlsym,
// pthread_create and the driver's own names (intercept.map).
//
// Note [Interposer]
// It sees each allocation a process makes through the CUDA driver API, however the call was bound, and
// records it in the process's default tracepool instance as observed memory (Note [Observed memory] in
// core/observed.h): tracepool's own pool and what the rest of the process took from the driver appear in
// one report, each at the lines that asked. It hooks three seams (docs/research/cuda-driver-interposition.md
// §6):
//   - dlsym: a lookup of a driver entry point by name (XLA, PyTorch, and the CUDA runtime's one lookup of
//     cuGetProcAddress_v2) gets our wrapper of what the real dlsym found;
//   - cuGetProcAddress and cuGetProcAddress_v2, which the CUDA runtime (shared or static), NCCL and
//     cudaGetDriverEntryPoint go through: the real resolver answers, and a pointer it returns is replaced
//     by our wrapper of it where we have one;
//   - the same names, exported here, for programs linked against libcuda (-lcuda).
// A fourth seam, pthread_create (thread_origins.cpp), charges the threads a library starts to the line that
// started them (Note [Thread origins] in core/trace/tracer.h).
// A pointer's exported name (dladdr) says which function it is, hence its ABI: the driver answers
// "cuMemAlloc" with cuMemAlloc_v2, and "cuMemAllocAsync" with cuMemAllocAsync_ptsz for a per-thread
// stream caller; each has a wrapper of its own with exactly its signature, and a name we do not wrap
// passes through as the driver gave it. A resolver never answers for a symbol the driver lacks (the names we
// export exist whatever the driver has: a program linked against a driver without one gets
// CUDA_ERROR_NOT_FOUND from it). Lookups by RTLD_DEFAULT and RTLD_NEXT are glibc's alone, in the caller's
// scope: RTLD_DEFAULT finds our exported names first.
//
// Every call passes through unchanged: the caller's arguments go to the driver's function and its result
// comes back as is. A call that fails records nothing; one the driver refused for want of memory makes
// tracepool's out-of-memory report (tracepool_observe_oom), as a pool allocation that fails does. An allocation is recorded after the driver made it,
// and forgotten before the driver takes it back (once freed, another thread may get the same address).
// Recording captures the call stack and may make the default instance, which loads the driver: a thread
// that is recording passes every driver call straight through (`recording`), so nothing recurses.
//
// The pool is counted once: a lookup made from inside libtracepool.so (its CUDA backend loading the
// driver) gets the driver's own pointers, so the segments tracepool takes are the pool's, not "outside".
//
// The context and loaded modules, which no entry point hands out, are measured (Note [Context memory]). What
// it does not see, and says so in docs/intercept.md: graph memory allocated at launch, code loaded by launches
// through other entry points, and callers that bypass dlsym (dlvsym, dlmopen namespaces).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <cstdio>
#include <initializer_list>

#include "intercept.h"
#include "tracepool/tracepool.h"

#undef cuGetProcAddress  // cuda.h maps it to cuGetProcAddress_v2; we define both ABIs

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
  X(cuCtxDisablePeerAccess)

#define TRACEPOOL_EXPORT extern "C" __attribute__((visibility("default")))

// Our definitions, declared first so that the table below can name them.
TRACEPOOL_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags);
TRACEPOOL_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* ptr, size_t size, CUstream stream);
TRACEPOOL_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* ptr, size_t size, CUmemoryPool pool, CUstream stream);
TRACEPOOL_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream stream);
TRACEPOOL_EXPORT CUresult cuCtxCreate_v2(CUcontext* context, unsigned int flags, CUdevice device);  // CUDA 3.2's ABI
TRACEPOOL_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                                              unsigned int block_x, unsigned int block_y, unsigned int block_z,
                                              unsigned int shared, CUstream stream, void** params, void** extra);
TRACEPOOL_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra);

namespace {

enum entry : int {
#define TRACEPOOL_ENTRY_ID(name) e_##name,
  TRACEPOOL_INTERCEPTED(TRACEPOOL_ENTRY_ID)
#undef TRACEPOOL_ENTRY_ID
  entry_count
};

struct entry_point {
  const char* name;  // as exported by libcuda.so.1
  void* wrapper;     // ours
};
const entry_point entries[entry_count] = {
#define TRACEPOOL_ENTRY(name) {#name, reinterpret_cast<void*>(&::name)},
    TRACEPOOL_INTERCEPTED(TRACEPOOL_ENTRY)
#undef TRACEPOOL_ENTRY
};

// The driver's own function behind each wrapper: the first pointer a resolver handed out for that name,
// else looked up in libcuda.so.1 on first call (a program linked against it calls ours directly).
std::atomic<void*> real_functions[entry_count];

int entry_of(const char* name) {
  for (int e = 0; e < entry_count; ++e)
    if (strcmp(entries[e].name, name) == 0) return e;
  return -1;
}

using dlsym_fn = void* (*)(void*, const char*) noexcept;

// glibc's dlsym, under the version a program built today binds to, else the older ones. No function-local
// static: a sanitizer's runtime calls our dlsym as it starts, before it can serve the guard of one.
std::atomic<dlsym_fn> glibc_dlsym{nullptr};

dlsym_fn real_dlsym() noexcept {
  if (dlsym_fn found = glibc_dlsym.load(std::memory_order_acquire)) return found;
  for (const char* version : {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"}) {
    if (void* p = dlvsym(RTLD_NEXT, "dlsym", version)) {
      glibc_dlsym.store(reinterpret_cast<dlsym_fn>(p), std::memory_order_release);
      return reinterpret_cast<dlsym_fn>(p);
    }
  }
  std::fprintf(stderr, "tracepool: intercept: glibc's dlsym cannot be found; nothing works from here\n");
  std::abort();
}

// Values found once. Never a function-local static initialised by a call: its guard would be held across
// dlopen, dladdr or dlsym, which take the loader's lock, and a thread inside dlopen whose library's constructor
// reaches the interposer would wait for the guard while its holder waits for the loader. Threads that race
// here find the same value twice. `none` stands for "looked for, not there".
char none_object;
void* const none = &none_object;

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

std::atomic<void*> driver_handle{nullptr};

void* driver_library() {
  return found_once(&driver_handle, [] {
    void* l = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return l != nullptr ? l : dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  });
}

void* driver_symbol(const char* name) {
  void* library = driver_library();
  return library != nullptr ? real_dlsym()(library, name) : nullptr;
}

// A driver function the interposer calls itself (the driver's own, never a wrapper), found once.
#define TRACEPOOL_DRIVER_FUNCTION(type, name)                                             \
  ([]() -> type {                                                                          \
    static std::atomic<void*> slot{nullptr};                                               \
    return reinterpret_cast<type>(found_once(&slot, [] { return driver_symbol(name); })); \
  }())

template <class F>
F real(entry e) {
  void* p = real_functions[e].load(std::memory_order_acquire);
  if (p == nullptr) {
    void* found = driver_symbol(entries[e].name);
    if (found != nullptr && real_functions[e].compare_exchange_strong(p, found)) p = found;
  }
  return reinterpret_cast<F>(p);
}

// Where a library was loaded: the one holding `address`.
void* base_of(const void* address) {
  Dl_info info{};
  return dladdr(address, &info) != 0 ? info.dli_fbase : nullptr;
}

std::atomic<void*> self_slot{nullptr}, tracepool_slot{nullptr};

const void* self_base() {
  return found_once(&self_slot, [] { return base_of(reinterpret_cast<const void*>(&real_dlsym)); });
}

const void* tracepool_base() {
  return found_once(&tracepool_slot, [] { return base_of(reinterpret_cast<const void*>(&tracepool_default)); });
}

// TRACEPOOL_INTERCEPT_LOG=1: a line on stderr for each lookup the interposer answers and each call it
// records or measures, to see what a program does with the driver. Read once (no function-local static:
// dlsym may run before a sanitizer's runtime can serve one).
std::atomic<int> log_state{-1};

bool logging() {
  int on = log_state.load(std::memory_order_relaxed);
  if (on < 0) {
    const char* v = getenv("TRACEPOOL_INTERCEPT_LOG");
    on = v != nullptr && *v != '\0' && strcmp(v, "0") != 0;
    log_state.store(on, std::memory_order_relaxed);
  }
  return on != 0;
}

// Our wrapper for the driver function at `p`, found by its exported name; `p` itself where we have none,
// or where `p` is ours already. `asked`: the name the caller looked up, for the log.
void* substitute(void* p, const char* asked) {
  Dl_info info{};
  if (dladdr(p, &info) == 0 || info.dli_sname == nullptr || info.dli_saddr != p || info.dli_fbase == self_base()) {
    if (logging())
      std::fprintf(stderr, "tracepool: intercept: %s: %p (%s) passed on\n", asked != nullptr ? asked : "?", p,
                   info.dli_sname != nullptr ? info.dli_sname : "no exported name");
    return p;
  }
  const int e = entry_of(info.dli_sname);
  if (logging()) std::fprintf(stderr, "tracepool: intercept: %s: %s %s\n", asked != nullptr ? asked : "?", info.dli_sname, e < 0 ? "passed on" : "wrapped");
  if (e < 0) return p;
  void* none = nullptr;
  real_functions[e].compare_exchange_strong(none, p);
  return entries[e].wrapper;
}

// ---- Recording ----------------------------------------------------------------------------------------

using tracepool::intercept::recording;

// One line on stderr, the first time `what` happens in this process.
void say_once(std::atomic<bool>* said, const char* what, const char* detail) {
  if (!said->exchange(true)) std::fprintf(stderr, "tracepool: intercept: %s%s\n", what, detail);
}

std::atomic<bool> frames_registered{false};
std::atomic<tracepool_t*> recorded{nullptr};

tracepool_t* instance() {
  // Our frames are tracepool's, not the caller's: the reports' stacks begin at the driver call.
  if (!frames_registered.exchange(true)) (void)tracepool_add_bindings_module(reinterpret_cast<const void*>(&real_dlsym));
  tracepool_t* tp = tracepool_default();
  static std::atomic<bool> said{false};
  if (tp == nullptr) say_once(&said, "driver allocations are not recorded: ", tracepool_last_error());
  else recorded.store(tp, std::memory_order_release);
  return tp;
}

int current_device() {
  const auto get = TRACEPOOL_DRIVER_FUNCTION(PFN_cuCtxGetDevice_v2000, "cuCtxGetDevice");
  static std::atomic<bool> said{false};
  CUdevice device = 0;
  if (get == nullptr) say_once(&said, "the driver has no cuCtxGetDevice: its allocations are put on device 0", "");
  else if (get(&device) != CUDA_SUCCESS) device = 0;
  return device;
}

void seen(const void* ptr, size_t size, int device, int kind, const char* source) {
  if (recording) return;
  if (logging()) std::fprintf(stderr, "tracepool: intercept: %s: %zu bytes at %p on device %d\n", source, size, ptr, device);
  recording = true;
  if (tracepool_t* tp = instance(); tp != nullptr && tracepool_observe_alloc(tp, ptr, size, device, kind, source) != TRACEPOOL_OK) {
    static std::atomic<bool> said{false};
    say_once(&said, tracepool_last_error(), " (later failures to record are not said)");
  }
  recording = false;
}

// The driver refused `size` bytes for want of memory: tracepool's out-of-memory report, as for its pool's own
// (printed unless oom_report:off), names who holds the device. The program may still recover (PyTorch's own
// allocator frees its cache and asks again).
void refused(size_t size, int device, const char* source) {
  if (recording) return;
  if (logging()) std::fprintf(stderr, "tracepool: intercept: %s: %zu bytes refused on device %d\n", source, size, device);
  recording = true;
  if (tracepool_t* tp = instance()) (void)tracepool_observe_oom(tp, size, device, source);
  recording = false;
}

void seen_device(CUresult r, const CUdeviceptr* ptr, size_t size, int kind, const char* source) {
  if (r == CUDA_SUCCESS && ptr != nullptr && !recording)
    seen(reinterpret_cast<const void*>(*ptr), size, current_device(), kind, source);
  else if (r == CUDA_ERROR_OUT_OF_MEMORY && !recording && size != 0)
    refused(size, current_device(), source);
}

// Before the driver takes `ptr` back. A pointer recorded by nobody (allocated before the instance could
// record, or by tracepool's own pool) is simply not found.
void gone(const void* ptr) {
  if (recording || ptr == nullptr) return;
  recording = true;
  if (tracepool_t* tp = tracepool_default(); tp != nullptr) (void)tracepool_observe_free(tp, ptr);
  recording = false;
}

const void* as_pointer(CUdeviceptr p) { return reinterpret_cast<const void*>(static_cast<uintptr_t>(p)); }

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
// access"), until access is disabled again.
// Limits: a module's lazily loaded code stays recorded after the module is unloaded or its context destroyed
// (nothing maps a function to its module), and a function that reuses a freed one's address is not measured
// again; the modules of a context are not forgotten with it.

// Whether `device`'s primary context is active (retained by someone); -1 where the driver cannot say.
int primary_active(CUdevice device) {
  const auto state = TRACEPOOL_DRIVER_FUNCTION(PFN_cuDevicePrimaryCtxGetState_v7000, "cuDevicePrimaryCtxGetState");
  unsigned int flags = 0;
  int active = 0;
  return state != nullptr && state(device, &flags, &active) == CUDA_SUCCESS ? active != 0 : -1;
}

// The device's used bytes, or SIZE_MAX where they cannot be told (the caller records nothing then): the
// driver's own count where this thread's current context is on `device` and can tell, else tracepool's (NVML
// where the process has no context there).
size_t used_on(int device) {
  const auto get_current = TRACEPOOL_DRIVER_FUNCTION(PFN_cuCtxGetCurrent_v4000, "cuCtxGetCurrent");
  const auto get_device = TRACEPOOL_DRIVER_FUNCTION(PFN_cuCtxGetDevice_v2000, "cuCtxGetDevice");
  const auto get_info = TRACEPOOL_DRIVER_FUNCTION(PFN_cuMemGetInfo_v3020, "cuMemGetInfo_v2");
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
  const auto retain = TRACEPOOL_DRIVER_FUNCTION(PFN_cuDevicePrimaryCtxRetain_v7000, "cuDevicePrimaryCtxRetain");
  const auto release = TRACEPOOL_DRIVER_FUNCTION(PFN_cuDevicePrimaryCtxRelease_v11000, "cuDevicePrimaryCtxRelease_v2");
  const auto push = TRACEPOOL_DRIVER_FUNCTION(PFN_cuCtxPushCurrent_v4000, "cuCtxPushCurrent_v2");
  const auto pop = TRACEPOOL_DRIVER_FUNCTION(PFN_cuCtxPopCurrent_v4000, "cuCtxPopCurrent_v2");
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
  void took(CUresult r, const void* handle, const char* source, CUcontext current = nullptr) const {
    if (r != CUDA_SUCCESS || handle == nullptr || before == SIZE_MAX || recording) return;
    const auto push = TRACEPOOL_DRIVER_FUNCTION(PFN_cuCtxPushCurrent_v4000, "cuCtxPushCurrent_v2");
    const auto pop = TRACEPOOL_DRIVER_FUNCTION(PFN_cuCtxPopCurrent_v4000, "cuCtxPopCurrent_v2");
    recording = true;
    const bool pushed = current != nullptr && push != nullptr && pop != nullptr && push(current) == CUDA_SUCCESS;
    const size_t after = used_on(device);
    CUcontext popped = nullptr;
    if (pushed) (void)pop(&popped);
    recording = false;
    if (logging())
      std::fprintf(stderr, "tracepool: intercept: %s: device %d used %zd bytes before, %zd after\n", source, device,
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

// A function's first use, measured (Note [Context memory]): the thread's capture mode relaxed while the
// device's used bytes are read, so that a stream being captured is not invalidated by the reading.
template <class Use>
CUresult measured_first_use(const void* f, Use use) {
  if (recording || !first_use(f)) return use();
  const auto exchange = TRACEPOOL_DRIVER_FUNCTION(PFN_cuThreadExchangeStreamCaptureMode_v10010, "cuThreadExchangeStreamCaptureMode");
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  const bool relaxed = exchange != nullptr && exchange(&mode) == CUDA_SUCCESS;
  const measure m(current_device());
  CUstreamCaptureMode theirs = mode;
  if (relaxed) (void)exchange(&theirs);  // the caller's mode for the call itself
  const CUresult r = use();
  mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (relaxed) (void)exchange(&mode);
  gone(f);  // a record left at this address by an unloaded function (Note [Context memory]'s limits)
  m.took(r, f, "module (lazy load)");
  if (relaxed) (void)exchange(&mode);
  return r;
}

// The primary context of each device that was recorded, so that its last release can forget it.
constexpr int most_devices = 64;
std::atomic<const void*> primary_contexts[most_devices];

}  // namespace

// ---- The seams ----------------------------------------------------------------------------------------

namespace {

// A lookup of a driver entry point: our wrapper of what glibc's dlsym finds, except for tracepool's own.
__attribute__((noinline)) void* driver_lookup(void* handle, const char* name, const void* caller) noexcept {
  void* p = real_dlsym()(handle, name);
  if (p == nullptr) return nullptr;
  Dl_info info{};
  if (dladdr(caller, &info) != 0 && info.dli_fbase == tracepool_base()) return p;
  return substitute(p, name);
}

}  // namespace

namespace tracepool::intercept {
__attribute__((tls_model("initial-exec"))) thread_local bool recording = false;
tracepool_t* recorded_instance() { return recorded.load(std::memory_order_acquire); }
}  // namespace tracepool::intercept

// Any other lookup is glibc's alone, by a tail call, so that glibc sees the caller's own return address:
// RTLD_NEXT and RTLD_DEFAULT are resolved in the caller's scope (a library loaded RTLD_LOCAL finds its own
// dependencies), and RTLD_DEFAULT finds our exported wrappers first anyway. dlsym has no local of its own
// for that reason, and intercept.cpp is always compiled with optimisation (CMakeLists.txt).
TRACEPOOL_EXPORT void* dlsym(void* __restrict handle, const char* __restrict name) noexcept {
  if (handle != RTLD_NEXT && handle != RTLD_DEFAULT && name[0] == 'c' && name[1] == 'u')
    return driver_lookup(handle, name, __builtin_return_address(0));
  return real_dlsym()(handle, name);
}

TRACEPOOL_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                              CUdriverProcAddressQueryResult* status) {
  const auto resolve = real<PFN_cuGetProcAddress_v12000>(e_cuGetProcAddress_v2);
  if (resolve == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = resolve(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr && *pfn != nullptr) *pfn = substitute(*pfn, symbol);
  return r;
}

// The CUDA 11.3 ABI, four arguments.
TRACEPOOL_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  const auto resolve = real<PFN_cuGetProcAddress_v11030>(e_cuGetProcAddress);
  if (resolve == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = resolve(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr && *pfn != nullptr) *pfn = substitute(*pfn, symbol);
  return r;
}

// ---- Allocations --------------------------------------------------------------------------------------
// Each: the driver's function, then what it made, recorded; a free: forgotten, then the driver's function.
// A function the driver lacks is never handed out, so `real` finds it for every call that reaches here,
// except through the exported names in a program linked against a driver without them: CUDA_ERROR_NOT_FOUND.

#define TRACEPOOL_REAL(name) \
  const auto driver = real<decltype(&::name)>(e_##name); \
  if (driver == nullptr) return CUDA_ERROR_NOT_FOUND

TRACEPOOL_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t size) {
  TRACEPOOL_REAL(cuMemAlloc_v2);
  const CUresult r = driver(ptr, size);
  seen_device(r, ptr, size, TRACEPOOL_OBSERVED_DEVICE, "cuMemAlloc");
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* ptr, size_t* pitch, size_t width, size_t height,
                                             unsigned int element) {
  TRACEPOOL_REAL(cuMemAllocPitch_v2);
  const CUresult r = driver(ptr, pitch, width, height, element);
  if (r == CUDA_SUCCESS && pitch != nullptr) seen_device(r, ptr, *pitch * height, TRACEPOOL_OBSERVED_DEVICE, "cuMemAllocPitch");
  else if (r == CUDA_ERROR_OUT_OF_MEMORY) seen_device(r, ptr, width * height, TRACEPOOL_OBSERVED_DEVICE, "cuMemAllocPitch");
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* ptr, size_t size, unsigned int flags) {
  TRACEPOOL_REAL(cuMemAllocManaged);
  const CUresult r = driver(ptr, size, flags);
  seen_device(r, ptr, size, TRACEPOOL_OBSERVED_MANAGED, "cuMemAllocManaged");
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) {
  TRACEPOOL_REAL(cuMemFree_v2);
  gone(as_pointer(ptr));
  return driver(ptr);
}

TRACEPOOL_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* ptr, size_t size, CUstream stream) {
  TRACEPOOL_REAL(cuMemAllocAsync);
  const CUresult r = driver(ptr, size, stream);
  seen_device(r, ptr, size, TRACEPOOL_OBSERVED_DEVICE, "cuMemAllocAsync");
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* ptr, size_t size, CUstream stream) {
  TRACEPOOL_REAL(cuMemAllocAsync_ptsz);
  const CUresult r = driver(ptr, size, stream);
  seen_device(r, ptr, size, TRACEPOOL_OBSERVED_DEVICE, "cuMemAllocAsync");
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* ptr, size_t size, CUmemoryPool pool, CUstream stream) {
  TRACEPOOL_REAL(cuMemAllocFromPoolAsync);
  const CUresult r = driver(ptr, size, pool, stream);
  seen_device(r, ptr, size, TRACEPOOL_OBSERVED_DEVICE, "cuMemAllocFromPoolAsync");
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* ptr, size_t size, CUmemoryPool pool, CUstream stream) {
  TRACEPOOL_REAL(cuMemAllocFromPoolAsync_ptsz);
  const CUresult r = driver(ptr, size, pool, stream);
  seen_device(r, ptr, size, TRACEPOOL_OBSERVED_DEVICE, "cuMemAllocFromPoolAsync");
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream stream) {
  TRACEPOOL_REAL(cuMemFreeAsync);
  gone(as_pointer(ptr));
  return driver(ptr, stream);
}

TRACEPOOL_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream stream) {
  TRACEPOOL_REAL(cuMemFreeAsync_ptsz);
  gone(as_pointer(ptr));
  return driver(ptr, stream);
}

TRACEPOOL_EXPORT CUresult cuMemHostAlloc(void** ptr, size_t size, unsigned int flags) {
  TRACEPOOL_REAL(cuMemHostAlloc);
  const CUresult r = driver(ptr, size, flags);
  if (r == CUDA_SUCCESS && ptr != nullptr && !recording) seen(*ptr, size, current_device(), TRACEPOOL_OBSERVED_HOST, "cuMemHostAlloc");
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemAllocHost_v2(void** ptr, size_t size) {
  TRACEPOOL_REAL(cuMemAllocHost_v2);
  const CUresult r = driver(ptr, size);
  if (r == CUDA_SUCCESS && ptr != nullptr && !recording) seen(*ptr, size, current_device(), TRACEPOOL_OBSERVED_HOST, "cuMemAllocHost");
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemFreeHost(void* ptr) {
  TRACEPOOL_REAL(cuMemFreeHost);
  gone(ptr);
  return driver(ptr);
}

// VMM: the physical memory is made by cuMemCreate and goes with the last of cuMemRelease and cuMemUnmap;
// it is recorded under its handle, which is what cuMemRelease names (reserving and mapping address space
// allocates nothing).
TRACEPOOL_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                                      unsigned long long flags) {
  TRACEPOOL_REAL(cuMemCreate);
  const CUresult r = driver(handle, size, prop, flags);
  if (r == CUDA_ERROR_OUT_OF_MEMORY && prop != nullptr && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
    refused(size, prop->location.id, "cuMemCreate");
  if (r == CUDA_SUCCESS && handle != nullptr && !recording) {
    const CUmemLocationType where = prop != nullptr ? prop->location.type : CU_MEM_LOCATION_TYPE_INVALID;
    const bool on_host = where == CU_MEM_LOCATION_TYPE_HOST || where == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
                         where == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
    seen(reinterpret_cast<const void*>(static_cast<uintptr_t>(*handle)), size,
         where == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : current_device(),
         on_host ? TRACEPOOL_OBSERVED_HOST : TRACEPOOL_OBSERVED_DEVICE, "cuMemCreate");
  }
  return r;
}

TRACEPOOL_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  TRACEPOOL_REAL(cuMemRelease);
  gone(reinterpret_cast<const void*>(static_cast<uintptr_t>(handle)));
  return driver(handle);
}

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
  m.took(r, key, "peer access (cuCtxEnablePeerAccess)");
  return r;
}

TRACEPOOL_EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peer) {
  TRACEPOOL_REAL(cuCtxDisablePeerAccess);
  if (const void* key = peer_key(peer, current_device())) gone(key);
  return driver(peer);
}
