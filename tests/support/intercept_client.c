/* intercept_client.c: a program that reaches the driver (the stand-in, stand_in_cuda.c) as real programs do,
 * run by tests/unit/intercept_test.cpp under the interposer (LD_PRELOAD=libtracepool_intercept.so), with
 * TRACEPOOL_REPORT naming its report. Each mode keeps some blocks (leaks, in functions named for the way
 * they were got) and frees others:
 *   runtime   dlopen("libcuda.so.1") and cuGetProcAddress_v2, as the CUDA runtime does; then the 11.3
 *             resolver (cuGetProcAddress, 4 arguments) got from cuGetProcAddress itself; then dlsym
 *   threads   8 threads, each 1000 allocations and frees of 64 KiB, each keeping 1 MiB at the end
 *   fork      keeps 1 MiB, forks; the child allocates, frees and keeps 2 MiB, and exits; the parent waits
 *   modules   retains the primary context twice (make_context), loads two modules and unloads one
 *             (load_kernels); with "release" after it, releases the context twice: it is gone
 *   atexit    keeps 2 MiB, and frees 3 MiB in an atexit handler and 1 MiB in a destructor, both running
 *             after the report at exit is written (registered first, they run last)
 *   launch    launches one function twice and another once, then asks a third and the first for an
 *             attribute (run_kernels): the stand-in loads each one's code (2 MiB) at its first use, as lazy
 *             loading does
 *   streams   makes three streams and one with a priority, and destroys one (make_streams): each takes 2 MiB of
 *             the stand-in's device
 *   peer [off] enables peer access to the context (enable_peer_access): 2 MiB; with `off`, disables it after
 *   oom       keeps 3 MiB (keep_some), then asks for 64 GiB, more than the device has (ask_too_much)
 *   bench N   N pairs of cuMemAlloc(64 KiB) + cuMemFree through the runtime's way after a warm-up; prints ns
 *             per pair (tests/bench/intercept_bench.py: what the interposer adds to each pair)
 *   next      dlsym(RTLD_NEXT, ...) from a library loaded after the interposer still finds the next one
 *   local P   dlsym(RTLD_DEFAULT, ...) from the library at P, loaded RTLD_LOCAL, still finds its own dependency's
 *             entry point (local_probe.c)
 * Prints one line per step; exits 0 when every step went as the line says. Entry points the driver lacks
 * (the minimal stand-in) are said and skipped. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int (*get_proc_fn)(const char*, void**, int, unsigned long long, int*);
typedef int (*get_proc_legacy_fn)(const char*, void**, int, unsigned long long);
typedef int (*init_fn)(unsigned);
typedef int (*alloc_fn)(unsigned long long*, size_t);
typedef int (*free_fn)(unsigned long long);
typedef int (*alloc_async_fn)(unsigned long long*, size_t, void*);
typedef int (*host_alloc_fn)(void**, size_t, unsigned);

int tracepool_next_probe(void); /* next_probe.c: 1 when RTLD_NEXT found libc's function */

static void* driver;
static get_proc_fn get_proc;
static alloc_fn mem_alloc;
static free_fn mem_free;

static void* entry(const char* name) {
  void* fn = NULL;
  int found = -1;
  if (get_proc(name, &fn, 12000, 0, &found) != 0 || fn == NULL) printf("%s: not offered (status %d)\n", name, found);
  return fn;
}

static int open_driver(void) {
  driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == NULL) return printf("dlopen: %s\n", dlerror()), 1;
  get_proc = (get_proc_fn)dlsym(driver, "cuGetProcAddress_v2");
  if (get_proc == NULL) return printf("no cuGetProcAddress_v2\n"), 1;
  init_fn init = (init_fn)entry("cuInit");
  mem_alloc = (alloc_fn)entry("cuMemAlloc");
  mem_free = (free_fn)entry("cuMemFree");
  if (init == NULL || mem_alloc == NULL || mem_free == NULL || init(0) != 0) return printf("driver unusable\n"), 1;
  return 0;
}

/* Noinline, so that each is a frame of its own in the report. */
#define KEEP __attribute__((noinline))

KEEP static int leak_through_runtime(void) {
  unsigned long long kept = 0, freed = 0;
  if (mem_alloc(&kept, 3u << 20) != 0 || mem_alloc(&freed, 4u << 20) != 0 || mem_free(freed) != 0) return 1;
  alloc_async_fn alloc_async = (alloc_async_fn)entry("cuMemAllocAsync");
  if (alloc_async != NULL && alloc_async(&kept, 1u << 20, NULL) != 0) return 1;
  host_alloc_fn host_alloc = (host_alloc_fn)entry("cuMemHostAlloc");
  void* pinned = NULL;
  if (host_alloc != NULL && host_alloc(&pinned, 2u << 20, 0) != 0) return 1;
  printf("runtime: kept 3 MiB%s%s\n", alloc_async != NULL ? ", 1 MiB async" : "", host_alloc != NULL ? ", 2 MiB pinned" : "");
  return 0;
}

KEEP static int leak_through_legacy_resolver(void) {
  void* fn = NULL;
  if (get_proc("cuGetProcAddress", &fn, 11030, 0, NULL) != 0 || fn == NULL) return printf("no 11.3 resolver\n"), 1;
  get_proc_legacy_fn legacy = (get_proc_legacy_fn)fn;
  void* alloc = NULL;
  if (legacy("cuMemAlloc", &alloc, 12000, 0) != 0 || alloc == NULL) return 1;
  unsigned long long kept = 0;
  if (((alloc_fn)alloc)(&kept, 5u << 20) != 0) return 1;
  printf("legacy resolver: kept 5 MiB\n");
  return 0;
}

KEEP static int leak_through_dlsym(void) {
  alloc_fn alloc = (alloc_fn)dlsym(driver, "cuMemAlloc_v2");
  unsigned long long kept = 0;
  if (alloc == NULL || alloc(&kept, 6u << 20) != 0) return 1;
  printf("dlsym: kept 6 MiB\n");
  return 0;
}

static void* churn(void* arg) {
  (void)arg;
  for (int i = 0; i < 1000; ++i) {
    unsigned long long p = 0;
    if (mem_alloc(&p, 64u << 10) != 0 || mem_free(p) != 0) return (void*)1;
  }
  unsigned long long kept = 0;
  return mem_alloc(&kept, 1u << 20) == 0 ? NULL : (void*)1;
}

static int threads(void) {
  pthread_t t[8];
  for (int i = 0; i < 8; ++i) pthread_create(&t[i], NULL, churn, NULL);
  int failed = 0;
  for (int i = 0; i < 8; ++i) {
    void* r = NULL;
    pthread_join(t[i], &r);
    failed |= r != NULL;
  }
  printf("threads: %s\n", failed ? "failed" : "kept 8 MiB");
  return failed;
}

KEEP static int leak_in_child(void) {
  unsigned long long p = 0, kept = 0;
  return mem_alloc(&p, 2u << 20) != 0 || mem_free(p) != 0 || mem_alloc(&kept, 2u << 20) != 0;
}

KEEP static int forked(void) {
  unsigned long long kept = 0;
  if (mem_alloc(&kept, 1u << 20) != 0) return 1;
  fflush(stdout);
  const pid_t child = fork();
  if (child == 0) exit(leak_in_child());  /* exit, not _exit: the exit report is written at exit */
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return printf("fork failed\n"), 1;
  printf("fork: child pid %d exited %d\n", (int)child, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

typedef int (*retain_fn)(void**, int);
typedef int (*release_fn)(int);
typedef int (*load_fn)(void**, const void*);
typedef int (*unload_fn)(void*);

KEEP static int make_context(void) {
  retain_fn retain = (retain_fn)entry("cuDevicePrimaryCtxRetain");
  void *first = NULL, *second = NULL;
  if (retain == NULL || retain(&first, 0) != 0 || retain(&second, 0) != 0 || first != second) return 1;
  printf("modules: context retained twice\n");
  return 0;
}

KEEP static int load_kernels(void) {
  load_fn load = (load_fn)entry("cuModuleLoadData");
  unload_fn unload = (unload_fn)entry("cuModuleUnload");
  static const char image[] = "a fatbin";
  void *kept = NULL, *dropped = NULL;
  if (load == NULL || unload == NULL || load(&kept, image) != 0 || load(&dropped, image) != 0 || unload(dropped) != 0)
    return 1;
  printf("modules: one module kept\n");
  return 0;
}

static int release_context(void) {
  release_fn release = (release_fn)entry("cuDevicePrimaryCtxRelease");
  return release == NULL || release(0) != 0 || release(0) != 0;
}

static unsigned long long freed_at_exit, freed_by_destructor;

static void free_at_exit(void) {
  if (mem_free(freed_at_exit) != 0) _exit(3);
}

__attribute__((destructor)) static void free_in_destructor(void) {
  if (freed_by_destructor != 0 && mem_free(freed_by_destructor) != 0) _exit(4);
}

KEEP static int allocate_for_exit(void) {
  unsigned long long kept = 0;
  return mem_alloc(&freed_at_exit, 3u << 20) || mem_alloc(&freed_by_destructor, 1u << 20) || mem_alloc(&kept, 2u << 20);
}

typedef int (*launch_fn)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                         void**);

KEEP static int run_kernels(void) {
  launch_fn launch = (launch_fn)entry("cuLaunchKernel");
  static char first, second; /* two functions' handles */
  if (launch == NULL) return 1;
  for (int i = 0; i < 2; ++i)
    if (launch(&first, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) != 0) return 1;
  if (launch(&second, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) != 0) return 1;
  int (*attribute)(int*, int, void*) = (int (*)(int*, int, void*))entry("cuFuncGetAttribute");
  static char third;
  int value = 0;
  if (attribute == NULL || attribute(&value, 0, &third) != 0 || attribute(&value, 0, &first) != 0) return 1;
  printf("launch: 3 launches of 2 functions, attributes of 2\n");
  return 0;
}

KEEP static int make_streams(void) {
  int (*create)(void**, unsigned) = (int (*)(void**, unsigned))entry("cuStreamCreate");
  int (*with_priority)(void**, unsigned, int) = (int (*)(void**, unsigned, int))entry("cuStreamCreateWithPriority");
  int (*destroy)(void*) = (int (*)(void*))entry("cuStreamDestroy");
  void* streams[4] = {NULL, NULL, NULL, NULL};
  if (create == NULL || with_priority == NULL || destroy == NULL) return 1;
  for (int i = 0; i < 3; ++i)
    if (create(&streams[i], 0) != 0) return 1;
  if (with_priority(&streams[3], 0, -1) != 0) return 1;  /* as NCCL makes its streams */
  if (destroy(streams[1]) != 0) return 1;
  printf("streams: 3 made, 1 more with a priority, 1 destroyed\n");
  return 0;
}

/* Enables peer access to the context; with `off`, disables it after. */
KEEP static int enable_peer_access(int off) {
  int (*retain)(void**, int) = (int (*)(void**, int))entry("cuDevicePrimaryCtxRetain");
  int (*enable)(void*, unsigned) = (int (*)(void*, unsigned))entry("cuCtxEnablePeerAccess");
  int (*disable)(void*) = (int (*)(void*))entry("cuCtxDisablePeerAccess");
  void* context = NULL;
  if (retain == NULL || enable == NULL || disable == NULL || retain(&context, 0) != 0) return 1;
  if (enable(context, 0) != 0 || (off && disable(context) != 0)) return 1;
  printf("peer: enabled%s\n", off ? ", disabled" : "");
  return 0;
}

KEEP static int keep_some(void) {
  unsigned long long kept = 0;
  return mem_alloc(&kept, 3u << 20);
}

KEEP static int ask_too_much(void) {
  unsigned long long p = 0;
  const int r = mem_alloc(&p, 64ull << 30);
  printf("oom: the driver said %d\n", r);
  return r == 2 ? 0 : 1; /* CUDA_ERROR_OUT_OF_MEMORY */
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "next") == 0) {
    const int ok = tracepool_next_probe();
    printf("RTLD_NEXT: %s\n", ok ? "the next library's" : "wrong");
    return ok ? 0 : 1;
  }
  if (argc == 3 && strcmp(argv[1], "local") == 0) {
    void* probe = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    int (*local)(void) = probe != NULL ? (int (*)(void))dlsym(probe, "tracepool_local_probe") : NULL;
    const int ok = local != NULL && local();
    printf("RTLD_DEFAULT from a local library: %s\n", ok ? "its own dependency's" : "not found");
    return ok ? 0 : 1;
  }
  if (argc < 2 || argc > 3 || open_driver() != 0) return 2;
  if (strcmp(argv[1], "modules") == 0)
    return make_context() || load_kernels() || (argc == 3 && strcmp(argv[2], "release") == 0 && release_context());
  if (strcmp(argv[1], "runtime") == 0)
    return leak_through_runtime() || leak_through_legacy_resolver() || leak_through_dlsym();
  if (strcmp(argv[1], "threads") == 0) return threads();
  if (strcmp(argv[1], "oom") == 0) return keep_some() || ask_too_much();
  if (strcmp(argv[1], "launch") == 0) return run_kernels();
  if (strcmp(argv[1], "streams") == 0) return make_streams();
  if (strcmp(argv[1], "peer") == 0) return enable_peer_access(argc == 3 && strcmp(argv[2], "off") == 0);
  if (strcmp(argv[1], "bench") == 0 && argc == 3) {
    const long n = atol(argv[2]);
    unsigned long long p = 0;
    for (int i = 0; i < 1000; ++i)
      if (mem_alloc(&p, 64u << 10) != 0 || mem_free(p) != 0) return 1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; ++i)
      if (mem_alloc(&p, 64u << 10) != 0 || mem_free(p) != 0) return 1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("ns_per_pair %.1f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / (double)n);
    return 0;
  }
  if (strcmp(argv[1], "atexit") == 0) {
    atexit(free_at_exit);  /* before the first allocation makes tracepool's instance and its exit handler */
    return allocate_for_exit();
  }
  if (strcmp(argv[1], "fork") == 0) return forked();
  fprintf(stderr, "usage: intercept_client runtime|threads|fork|modules [release]|atexit|next\n");
  return 2;
}
