/* local_probe.c: a library that depends on libcuda.so.1 (the stand-in) and is loaded with RTLD_LOCAL, as every
 * Python extension is. Its dlsym(RTLD_DEFAULT, ...) is resolved in its own scope, so it finds an entry point of
 * its own dependency that the process's global scope lacks; the interposer's dlsym must keep that so. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

int cuInit(unsigned flags); /* linked: libcuda.so.1 is this library's dependency */

__attribute__((visibility("default"))) int tracepool_local_probe(void) {
  if (cuInit(0) != 0) return 0;
  int (*get_version)(int*) = (int (*)(int*))dlsym(RTLD_DEFAULT, "cuDriverGetVersion");
  int version = 0;
  return get_version != NULL && get_version(&version) == 0 && version == 13000;
}
