// intercept.cpp: libtracepool_intercept.so, the interposer (Note [Interposer]): how it finds the driver's
// functions, hooks the lookups of them, and records. It has no public header: a process loads it with
// LD_PRELOAD (python -m tracepool run --intercept), and it exports only dlsym, pthread_create and the
// driver's own names (intercept.map). The wrappers: allocations.cpp (what the driver hands out),
// context_memory.cpp (what it takes unasked: contexts, modules, streams; Note [Context memory]) and
// thread_origins.cpp (pthread_create); intercept.h is what they share.
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
// The context, loaded modules and streams, which no entry point hands out, are measured (Note [Context memory]
// in context_memory.cpp). What
// it does not see, and says so in docs/intercept.md: graph memory allocated at launch, code loaded by launches
// through other entry points, and callers that bypass dlsym (dlvsym, dlmopen namespaces).
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <cstdio>
#include <initializer_list>

#include "intercept.h"

using namespace tracepool::intercept;

namespace {

struct entry_point {
  const char* name;  // as exported by libcuda.so.1
  void* wrapper;     // ours
};
const entry_point entries[entry_count] = {
#define TRACEPOOL_ENTRY(name) {#name, reinterpret_cast<void*>(&::name)},
    TRACEPOOL_INTERCEPTED(TRACEPOOL_ENTRY)
#undef TRACEPOOL_ENTRY
};

// What real_function found for each wrapper.
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

std::atomic<void*> driver_handle{nullptr};

void* driver_library() {
  return found_once(&driver_handle, [] {
    void* l = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return l != nullptr ? l : dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  });
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

}  // namespace

namespace tracepool::intercept {

__attribute__((tls_model("initial-exec"))) thread_local bool recording = false;

void* driver_symbol(const char* name) {
  void* library = driver_library();
  return library != nullptr ? real_dlsym()(library, name) : nullptr;
}

// The driver's own function behind each wrapper: the first pointer a resolver handed out for that name, else
// looked up in libcuda.so.1 on first call (a program linked against it calls ours directly).
void* real_function(entry e) {
  void* p = real_functions[e].load(std::memory_order_acquire);
  if (p == nullptr) {
    void* found = driver_symbol(entries[e].name);
    if (found != nullptr && real_functions[e].compare_exchange_strong(p, found)) p = found;
  }
  return p;
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
  const auto get = TRACEPOOL_DRIVER_FUNCTION(cuCtxGetDevice_t*, "cuCtxGetDevice");
  static std::atomic<bool> said{false};
  CUdevice device = 0;
  if (get == nullptr) say_once(&said, "the driver has no cuCtxGetDevice: its allocations are put on device 0", "");
  else if (get(&device) != CUDA_SUCCESS) device = 0;
  return device;
}

void seen(const void* ptr, size_t size, int device, int kind, source_name source) {
  if (recording) return;
  if (logging()) std::fprintf(stderr, "tracepool: intercept: %s: %zu bytes at %p on device %d\n", source.text, size, ptr, device);
  recording = true;
  if (tracepool_t* tp = instance(); tp != nullptr && tracepool_observe_alloc(tp, ptr, size, device, kind, source.text) != TRACEPOOL_OK) {
    static std::atomic<bool> said{false};
    say_once(&said, tracepool_last_error(), " (later failures to record are not said)");
  }
  recording = false;
}

// The driver refused `size` bytes for want of memory: tracepool's out-of-memory report, as for its pool's own
// (printed unless oom_report:off), names who holds the device. The program may still recover (PyTorch's own
// allocator frees its cache and asks again).
void refused(size_t size, int device, source_name source) {
  if (recording) return;
  if (logging()) std::fprintf(stderr, "tracepool: intercept: %s: %zu bytes refused on device %d\n", source.text, size, device);
  recording = true;
  if (tracepool_t* tp = instance()) (void)tracepool_observe_oom(tp, size, device, source.text);
  recording = false;
}

void seen_device(CUresult r, const CUdeviceptr* ptr, size_t size, int kind, source_name source) {
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

tracepool_t* recorded_instance() { return recorded.load(std::memory_order_acquire); }

}  // namespace tracepool::intercept

// ---- The seams ----------------------------------------------------------------------------------------

namespace {

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


// A lookup of a driver entry point: our wrapper of what glibc's dlsym finds, except for tracepool's own.
__attribute__((noinline)) void* driver_lookup(void* handle, const char* name, const void* caller) noexcept {
  void* p = real_dlsym()(handle, name);
  if (p == nullptr) return nullptr;
  Dl_info info{};
  if (dladdr(caller, &info) != 0 && info.dli_fbase == tracepool_base()) return p;
  return substitute(p, name);
}

}  // namespace


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
  const auto resolve = real<cuGetProcAddress_v2_t*>(e_cuGetProcAddress_v2);
  if (resolve == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = resolve(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr && *pfn != nullptr) *pfn = substitute(*pfn, symbol);
  return r;
}

// The CUDA 11.3 ABI, four arguments.
TRACEPOOL_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  const auto resolve = real<cuGetProcAddress_t*>(e_cuGetProcAddress);
  if (resolve == nullptr) return CUDA_ERROR_NOT_FOUND;
  const CUresult r = resolve(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr && *pfn != nullptr) *pfn = substitute(*pfn, symbol);
  return r;
}
