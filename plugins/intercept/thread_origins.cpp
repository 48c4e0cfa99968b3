// thread_origins.cpp: the interposer's fourth seam, pthread_create (Note [Thread origins] in
// core/trace/tracer.h). Each thread started once the interposer has recorded anything adopts the site of
// the line that started it, so what a library's own threads allocate (NCCL's proxy threads, XLA's) is
// charged to the program's line that made them. A start the interposer cannot follow (no memory for its
// note, tracepool recording, no instance yet) passes on unchanged: the thread starts all the same.
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include <atomic>
#include <cstdio>

#include "intercept.h"

namespace {

using pthread_create_fn = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);

// glibc's, found on first use (by the thread starting the process's first thread, or any racing it: all
// find the same). A sanitizer's runtime that wraps pthread_create is found instead, as it should be.
std::atomic<pthread_create_fn> next_create{nullptr};

pthread_create_fn real_create() {
  pthread_create_fn found = next_create.load(std::memory_order_acquire);
  if (found == nullptr) {
    found = reinterpret_cast<pthread_create_fn>(dlsym(RTLD_NEXT, "pthread_create"));
    if (found == nullptr) {
      std::fprintf(stderr, "tracepool: intercept: no pthread_create after ours; nothing works from here\n");
      abort();
    }
    next_create.store(found, std::memory_order_release);
  }
  return found;
}

struct start {
  void* (*routine)(void*);
  void* arg;
  uint64_t origin;
};

void* adopting(void* p) {
  const start s = *static_cast<start*>(p);
  free(p);
  tracepool_adopt_thread_origin(s.origin);
  return s.routine(s.arg);
}

// Where the calling thread stands, for the thread it starts; 0 to let it start as it would.
uint64_t origin_here() {
  using tracepool::intercept::recording;
  if (recording) return 0;
  tracepool_t* tp = tracepool::intercept::recorded_instance();
  if (tp == nullptr) return 0;
  recording = true;
  uint64_t origin = 0;
  if (tracepool_thread_origin(tp, &origin) != TRACEPOOL_OK) origin = 0;
  recording = false;
  return origin;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int pthread_create(pthread_t* thread, const pthread_attr_t* attr,
                                                                     void* (*routine)(void*), void* arg) {
  const pthread_create_fn create = real_create();
  const uint64_t origin = origin_here();
  start* s = origin != 0 ? static_cast<start*>(malloc(sizeof(start))) : nullptr;
  if (s == nullptr) return create(thread, attr, routine, arg);
  *s = start{routine, arg, origin};
  const int rc = create(thread, attr, adopting, s);
  if (rc != 0) free(s);
  return rc;
}
