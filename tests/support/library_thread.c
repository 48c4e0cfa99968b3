/* library_thread.c: a library that does its work on threads of its own, as NCCL's proxy thread and XLA's
 * compile threads do: they run no Python frames, and allocate through the driver (test_intercept.py,
 * Note [Thread origins] in core/trace/tracer.h). */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef int (*mem_alloc_fn)(unsigned long long* ptr, size_t size);

__attribute__((noinline)) static int allocate_now(size_t size) {  /* a frame of its own: the tests look for it */
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
  mem_alloc_fn alloc = cuda != NULL ? (mem_alloc_fn)dlsym(cuda, "cuMemAlloc_v2") : NULL;
  unsigned long long ptr = 0;
  return alloc != NULL ? alloc(&ptr, size) : -1;
}

static void* allocate(void* size) { return (void*)(intptr_t)allocate_now((size_t)(uintptr_t)size); }

/* Allocates `size` bytes on a thread it starts, and waits for it: the driver's status, or -1. */
__attribute__((visibility("default"))) int allocate_on_its_own_thread(size_t size) {
  pthread_t thread;
  void* status = NULL;
  if (pthread_create(&thread, NULL, allocate, (void*)(uintptr_t)size) != 0 || pthread_join(thread, &status) != 0)
    return -1;
  return (int)(intptr_t)status;
}

/* A worker started once, which allocates what each call of run_on_worker asks, while that call waits. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static size_t asked;  /* bytes to allocate, 0: nothing asked */
static int answered;  /* the last request's answer is in `answer` */
static int answer;    /* the driver's status for the last request */

static void* serve(void* unused) {
  (void)unused;
  pthread_mutex_lock(&lock);
  for (;;) {
    while (asked == 0) pthread_cond_wait(&changed, &lock);
    const size_t size = asked;
    pthread_mutex_unlock(&lock);
    const int status = allocate_now(size);
    pthread_mutex_lock(&lock);
    asked = 0;
    answer = status;
    answered = 1;
    pthread_cond_broadcast(&changed);
  }
  return NULL;
}

/* Starts the worker: 0, or -1. */
__attribute__((visibility("default"))) int start_worker(void) {
  pthread_t thread;
  return pthread_create(&thread, NULL, serve, NULL) == 0 && pthread_detach(thread) == 0 ? 0 : -1;
}

/* Has the worker allocate `size` bytes (at least 1) and waits for it: the driver's status, or -1. */
__attribute__((visibility("default"))) int run_on_worker(size_t size) {
  if (size == 0) return -1;
  pthread_mutex_lock(&lock);
  asked = size;
  answered = 0;
  pthread_cond_broadcast(&changed);
  while (!answered) pthread_cond_wait(&changed, &lock);
  const int status = answer;
  pthread_mutex_unlock(&lock);
  return status;
}
