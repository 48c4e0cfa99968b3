/* stand_in_client.c: a program run against the stand-in driver (stand_in_cuda.c) by
 * tests/unit/stand_in_cuda_test.cpp, with LD_LIBRARY_PATH naming the stand-in's folder.
 *   stand_in_client driver     the driver as the CUDA runtime reaches it: dlopen("libcuda.so.1"), then
 *                              cuGetProcAddress_v2 for each entry point; allocates, frees, prints figures
 *   stand_in_client tracepool  tracepool's CUDA backend on it: prints the status and message it gives,
 *                              then that the host backend still serves
 * Prints one line per step; exits 0 when every step went as the line says. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "tracepool/tracepool.h"

typedef int (*get_proc_fn)(const char*, void**, int, unsigned long long, int*);
typedef int (*init_fn)(unsigned);
typedef int (*alloc_fn)(unsigned long long*, size_t);
typedef int (*free_fn)(unsigned long long);
typedef int (*info_fn)(size_t*, size_t*);

static int driver(void) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == NULL) return printf("dlopen: %s\n", dlerror()), 1;
  get_proc_fn get = (get_proc_fn)dlsym(cuda, "cuGetProcAddress_v2");
  if (get == NULL) return printf("no cuGetProcAddress_v2\n"), 1;
  void *init = NULL, *alloc = NULL, *release = NULL, *info = NULL, *missing = (void*)1;
  int status = -1;
  if (get("cuInit", &init, 12000, 0, NULL) || get("cuMemAlloc", &alloc, 12000, 0, NULL) ||
      get("cuMemFree", &release, 12000, 0, NULL) || get("cuMemGetInfo", &info, 12000, 0, NULL) ||
      get("cuMemMap", &missing, 12000, 0, &status))
    return printf("cuGetProcAddress failed\n"), 1;
  printf("cuMemMap: %s, status %d\n", missing == NULL ? "NULL" : "found", status);
  if (((init_fn)init)(0) != 0) return printf("cuInit failed\n"), 1;
  size_t free_before = 0, free_after = 0, total = 0;
  unsigned long long ptr = 0;
  ((info_fn)info)(&free_before, &total);
  if (((alloc_fn)alloc)(&ptr, 3u << 20) != 0 || ptr % 256 != 0) return printf("cuMemAlloc failed\n"), 1;
  memset((void*)(size_t)ptr, 0xab, 3u << 20);  /* host memory, usable as such */
  ((info_fn)info)(&free_after, &total);
  printf("allocated %zu bytes of %zu\n", free_before - free_after, total);
  if (((free_fn)release)(ptr) != 0) return printf("cuMemFree failed\n"), 1;
  ((info_fn)info)(&free_after, &total);
  printf("after the free %zu bytes in use\n", free_before - free_after);
  return 0;
}

static int with_tracepool(void) {
  tracepool_t* tp = NULL;
  const int rc = tracepool_create("backend:cuda", &tp);
  printf("backend:cuda: %s: %s\n", tracepool_status_string(rc), rc == TRACEPOOL_OK ? "" : tracepool_last_error());
  if (rc == TRACEPOOL_OK) tracepool_destroy(tp);
  if (tracepool_create("backend:host", &tp) != TRACEPOOL_OK) return printf("backend:host failed\n"), 1;
  void* p = NULL;
  const int served = tracepool_malloc(tp, 1 << 20, 0, NULL, &p) == TRACEPOOL_OK && tracepool_free(tp, p, NULL) == TRACEPOOL_OK;
  printf("backend:host: %s\n", served ? "serves" : "fails");
  tracepool_destroy(tp);
  return served ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "driver") == 0) return driver();
  if (argc == 2 && strcmp(argv[1], "tracepool") == 0) return with_tracepool();
  fprintf(stderr, "usage: stand_in_client driver|tracepool\n");
  return 2;
}
