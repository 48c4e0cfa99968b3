// intercept.cpp: libtracepool_intercept.so, the interposer (Note [Interposer]). It has no header: a
// process loads it with LD_PRELOAD (python -m tracepool run --intercept), and it exports only dlsym and
// the driver's own names (intercept.map).
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
// A pointer's exported name (dladdr) says which function it is, hence its ABI: the driver answers
// "cuMemAlloc" with cuMemAlloc_v2, and "cuMemAllocAsync" with cuMemAllocAsync_ptsz for a per-thread
// stream caller; each has a wrapper of its own with exactly its signature, and a name we do not wrap
// passes through as the driver gave it. We never answer for a symbol the driver lacks.
//
// Every call passes through unchanged: the caller's arguments go to the driver's function and its result
// comes back as is. A call that fails records nothing. An allocation is recorded after the driver made it,
// and forgotten before the driver takes it back (once freed, another thread may get the same address).
// Recording captures the call stack and may make the default instance, which loads the driver: a thread
// that is recording passes every driver call straight through (`recording`), so nothing recurses.
//
// The pool is counted once: a lookup made from inside libtracepool.so (its CUDA backend loading the
// driver) gets the driver's own pointers, so the segments tracepool takes are the pool's, not "outside".
//
// What it does not see, and says so in docs/intercept.md: memory no entry point hands out (the context,
// loaded modules: Note [Context memory] is issue 34's item 3), graph memory allocated at launch, and
// callers that bypass dlsym (dlvsym, dlmopen namespaces).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <cstdio>
#include <initializer_list>

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
  X(cuMemRelease)

#define TRACEPOOL_EXPORT extern "C" __attribute__((visibility("default")))

// Our definitions, declared first so that the table below can name them.
TRACEPOOL_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags);
TRACEPOOL_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* ptr, size_t size, CUstream stream);
TRACEPOOL_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* ptr, size_t size, CUmemoryPool pool, CUstream stream);
TRACEPOOL_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream stream);

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

// glibc's dlsym, under the version a program built today binds to, else the older ones.
dlsym_fn real_dlsym() noexcept {
  static const dlsym_fn found = [] {
    for (const char* version : {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"})
      if (void* p = dlvsym(RTLD_NEXT, "dlsym", version)) return reinterpret_cast<dlsym_fn>(p);
    std::fprintf(stderr, "tracepool: intercept: glibc's dlsym cannot be found; nothing works from here\n");
    std::abort();
  }();
  return found;
}

void* driver_library() {
  static void* const library = [] {
    void* l = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return l != nullptr ? l : dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  }();
  return library;
}

void* driver_symbol(const char* name) {
  void* library = driver_library();
  return library != nullptr ? real_dlsym()(library, name) : nullptr;
}

template <class F>
F real(entry e) {
  void* p = real_functions[e].load(std::memory_order_acquire);
  if (p == nullptr) {
    void* found = driver_symbol(entries[e].name);
    if (found != nullptr && real_functions[e].compare_exchange_strong(p, found)) p = found;
  }
  return reinterpret_cast<F>(p);
}

const void* self_base() {
  static const void* const base = [] {
    Dl_info info{};
    return dladdr(reinterpret_cast<void*>(&real_dlsym), &info) != 0 ? info.dli_fbase : nullptr;
  }();
  return base;
}

const void* tracepool_base() {
  static const void* const base = [] {
    Dl_info info{};
    return dladdr(reinterpret_cast<void*>(&tracepool_default), &info) != 0 ? info.dli_fbase : nullptr;
  }();
  return base;
}

// Our wrapper for the driver function at `p`, found by its exported name; `p` itself where we have none,
// or where `p` is ours already.
void* substitute(void* p) {
  Dl_info info{};
  if (dladdr(p, &info) == 0 || info.dli_sname == nullptr || info.dli_saddr != p || info.dli_fbase == self_base())
    return p;
  const int e = entry_of(info.dli_sname);
  if (e < 0) return p;
  void* none = nullptr;
  real_functions[e].compare_exchange_strong(none, p);
  return entries[e].wrapper;
}

// ---- Recording ----------------------------------------------------------------------------------------

// This thread is inside tracepool, recording: its driver calls pass straight through.
__attribute__((tls_model("initial-exec"))) thread_local bool recording = false;

// One line on stderr, the first time `what` happens in this process.
void say_once(std::atomic<bool>* said, const char* what, const char* detail) {
  if (!said->exchange(true)) std::fprintf(stderr, "tracepool: intercept: %s%s\n", what, detail);
}

tracepool_t* instance() {
  // Our frames are tracepool's, not the caller's: the reports' stacks begin at the driver call.
  [[maybe_unused]] static const int registered = tracepool_add_bindings_module(reinterpret_cast<const void*>(&real_dlsym));
  tracepool_t* tp = tracepool_default();
  static std::atomic<bool> said{false};
  if (tp == nullptr) say_once(&said, "driver allocations are not recorded: ", tracepool_last_error());
  return tp;
}

int current_device() {
  static const auto get = reinterpret_cast<PFN_cuCtxGetDevice_v2000>(driver_symbol("cuCtxGetDevice"));
  static std::atomic<bool> said{false};
  CUdevice device = 0;
  if (get == nullptr) say_once(&said, "the driver has no cuCtxGetDevice: its allocations are put on device 0", "");
  else if (get(&device) != CUDA_SUCCESS) device = 0;
  return device;
}

void seen(const void* ptr, size_t size, int device, int kind, const char* source) {
  if (recording) return;
  recording = true;
  if (tracepool_t* tp = instance(); tp != nullptr && tracepool_observe_alloc(tp, ptr, size, device, kind, source) != TRACEPOOL_OK) {
    static std::atomic<bool> said{false};
    say_once(&said, tracepool_last_error(), " (later failures to record are not said)");
  }
  recording = false;
}

void seen_device(CUresult r, const CUdeviceptr* ptr, size_t size, int kind, const char* source) {
  if (r == CUDA_SUCCESS && ptr != nullptr && !recording)
    seen(reinterpret_cast<const void*>(*ptr), size, current_device(), kind, source);
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

}  // namespace

// ---- The seams ----------------------------------------------------------------------------------------

namespace {

// A lookup of a driver entry point: our wrapper of what glibc's dlsym finds, except for tracepool's own.
__attribute__((noinline)) void* driver_lookup(void* handle, const char* name, const void* caller) noexcept {
  void* p = real_dlsym()(handle, name);
  if (p == nullptr) return nullptr;
  Dl_info info{};
  if (dladdr(caller, &info) != 0 && info.dli_fbase == tracepool_base()) return p;
  return substitute(p);
}

}  // namespace

// Any other lookup (RTLD_NEXT, or a name that is not the driver's) is glibc's alone, by a tail call, so
// that glibc sees the caller's own return address: RTLD_NEXT is relative to it. dlsym has no local of its
// own for that reason, and intercept.cpp is always compiled with optimisation (CMakeLists.txt).
TRACEPOOL_EXPORT void* dlsym(void* __restrict handle, const char* __restrict name) noexcept {
  if (handle != RTLD_NEXT && name[0] == 'c' && name[1] == 'u') return driver_lookup(handle, name, __builtin_return_address(0));
  return real_dlsym()(handle, name);
}

TRACEPOOL_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                              CUdriverProcAddressQueryResult* status) {
  const auto resolve = real<PFN_cuGetProcAddress_v12000>(e_cuGetProcAddress_v2);
  if (resolve == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = resolve(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr && *pfn != nullptr) *pfn = substitute(*pfn);
  return r;
}

// The CUDA 11.3 ABI, four arguments.
TRACEPOOL_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  const auto resolve = real<PFN_cuGetProcAddress_v11030>(e_cuGetProcAddress);
  if (resolve == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = resolve(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr && *pfn != nullptr) *pfn = substitute(*pfn);
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
