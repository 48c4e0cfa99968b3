/* library_thread.c: a library that does its work on a thread of its own, as NCCL's proxy thread does: the
 * thread runs no Python frames, and allocates through the driver (test_intercept.py, Note [Thread origins] in
 * core/trace/tracer.h). */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef int (*mem_alloc_fn)(unsigned long long* ptr, size_t size);

static void* allocate(void* size) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
  mem_alloc_fn alloc = cuda != NULL ? (mem_alloc_fn)dlsym(cuda, "cuMemAlloc_v2") : NULL;
  unsigned long long ptr = 0;
  return (void*)(intptr_t)(alloc != NULL ? alloc(&ptr, (size_t)(uintptr_t)size) : -1);
}

/* Allocates `size` bytes on a thread it starts, and waits for it: the driver's status, or -1. */
__attribute__((visibility("default"))) int allocate_on_its_own_thread(size_t size) {
  pthread_t thread;
  void* status = NULL;
  if (pthread_create(&thread, NULL, allocate, (void*)(uintptr_t)size) != 0 || pthread_join(thread, &status) != 0)
    return -1;
  return (int)(intptr_t)status;
}
