/* next_probe.c: a library loaded after the interposer (a dependency of intercept_client) that defines getuid
 * and asks dlsym(RTLD_NEXT, "getuid") for the next definition, as a program's own wrappers do. RTLD_NEXT is
 * relative to the library that calls dlsym: the answer must be libc's getuid, not this one. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <unistd.h>

__attribute__((visibility("default"))) uid_t getuid(void) {
  uid_t (*next)(void) = (uid_t(*)(void))dlsym(RTLD_NEXT, "getuid");
  return next != NULL && next != getuid ? next() : (uid_t)-1;
}

__attribute__((visibility("default"))) int tracepool_next_probe(void) {
  uid_t (*next)(void) = (uid_t(*)(void))dlsym(RTLD_NEXT, "getuid");
  return next != NULL && next != getuid;
}
