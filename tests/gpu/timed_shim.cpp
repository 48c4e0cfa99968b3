// timed_shim.cpp: how long a process spends inside tracepool's allocator, measured from outside it
// (tests/gpu/capture_bench.py's timed_* variants; tests/gpu/run.sh builds it with g++).
//
// Preloaded (LD_PRELOAD), it defines tracepool_malloc and tracepool_free, so the calls that the
// PyTorch allocator class (libtracepool_torch.so) and the plain entry points make bind here first;
// each is timed around the real function of the library named by TRACEPOOL_TIMED_LIB (the Python
// package's libtracepool.so, loaded by then). The same path as tracepool.torch.install() takes in
// any process, plus two clock reads per call, the same for every capture mode: the difference
// between two modes is what capture costs. timed_ns(), timed_allocs() and timed_frees() read the
// totals (ctypes).
#include <dlfcn.h>
#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

using malloc_fn = int (*)(void*, size_t, int, void*, void**);
using free_fn = int (*)(void*, void*, void*);

std::atomic<uint64_t> ns_inside{0}, allocs{0}, frees{0};

uint64_t now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return uint64_t(t.tv_sec) * 1000000000u + uint64_t(t.tv_nsec);
}

// The real function, from the library TRACEPOOL_TIMED_LIB names; the process stops if there is none
// (a benchmark that timed nothing would mislead).
void* real(const char* name) {
  const char* path = std::getenv("TRACEPOOL_TIMED_LIB");
  void* lib = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  void* fn = lib != nullptr ? dlsym(lib, name) : nullptr;
  if (fn == nullptr) {
    std::fprintf(stderr, "timed_shim: no %s in TRACEPOOL_TIMED_LIB=%s (%s)\n", name, path ? path : "(unset)",
                 dlerror());
    std::abort();
  }
  return fn;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int tracepool_malloc(void* tp, size_t size, int device, void* stream,
                                                            void** out) {
  static const auto fn = reinterpret_cast<malloc_fn>(real("tracepool_malloc"));
  const uint64_t t0 = now_ns();
  const int rc = fn(tp, size, device, stream, out);
  ns_inside.fetch_add(now_ns() - t0, std::memory_order_relaxed);
  allocs.fetch_add(1, std::memory_order_relaxed);
  return rc;
}

__attribute__((visibility("default"))) int tracepool_free(void* tp, void* ptr, void* stream) {
  static const auto fn = reinterpret_cast<free_fn>(real("tracepool_free"));
  const uint64_t t0 = now_ns();
  const int rc = fn(tp, ptr, stream);
  ns_inside.fetch_add(now_ns() - t0, std::memory_order_relaxed);
  frees.fetch_add(1, std::memory_order_relaxed);
  return rc;
}

__attribute__((visibility("default"))) uint64_t timed_ns(void) { return ns_inside.load(); }
__attribute__((visibility("default"))) uint64_t timed_allocs(void) { return allocs.load(); }
__attribute__((visibility("default"))) uint64_t timed_frees(void) { return frees.load(); }

}  // extern "C"
