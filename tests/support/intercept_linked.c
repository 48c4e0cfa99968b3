/* intercept_linked.c: a program linked against libcuda.so.1 (the full stand-in), as a CUDA C program built
 * with -lcuda is: its calls bind to the exported names, which the interposer defines first. Run by
 * tests/unit/intercept_test.cpp under the interposer. Keeps one block of each kind, 5 MiB by cuMemAllocHost (in leak_linked) and
 * frees one of each; exits 0 when every call succeeded. */
#include <stdio.h>
#include <string.h>

typedef struct {
  int type, handle_types;
  struct { int type, id; } location;
  void* win32;
  unsigned char flags[8];
} alloc_prop; /* CUmemAllocationProp's layout; location.type 1 is a device */

int cuInit(unsigned flags);
int cuMemAlloc_v2(unsigned long long* ptr, size_t size);
int cuMemFree_v2(unsigned long long ptr);
int cuMemAllocManaged(unsigned long long* ptr, size_t size, unsigned flags);
int cuMemAllocPitch_v2(unsigned long long* ptr, size_t* pitch, size_t width, size_t height, unsigned element);
int cuMemHostAlloc(void** ptr, size_t size, unsigned flags);
int cuMemAllocHost_v2(void** ptr, size_t size);
int cuMemFreeHost(void* ptr);
int cuMemCreate(unsigned long long* handle, size_t size, const alloc_prop* prop, unsigned long long flags);
int cuMemRelease(unsigned long long handle);

__attribute__((noinline)) static int leak_linked(void) {
  unsigned long long device = 0, managed = 0, pitched = 0, handle = 0, freed = 0;
  void *pinned = NULL, *host = NULL, *kept_host = NULL;
  size_t pitch = 0;
  alloc_prop prop;
  memset(&prop, 0, sizeof prop);
  prop.location.type = 1;
  return cuMemAlloc_v2(&device, 1u << 20) || cuMemAllocManaged(&managed, 2u << 20, 1) ||
         cuMemAllocPitch_v2(&pitched, &pitch, 1000, 1024, 4) || cuMemHostAlloc(&pinned, 3u << 20, 0) ||
         cuMemAllocHost_v2(&kept_host, 5u << 20) ||
         cuMemCreate(&handle, 4u << 20, &prop, 0) ||
         cuMemAlloc_v2(&freed, 7u << 20) || cuMemFree_v2(freed) || cuMemAllocHost_v2(&host, 7u << 20) ||
         cuMemFreeHost(host) || cuMemCreate(&freed, 7u << 20, &prop, 0) || cuMemRelease(freed);
}

int main(void) {
  if (cuInit(0) != 0 || leak_linked() != 0) return 1;
  printf("linked: kept 1 MiB device, 2 MiB managed, 1 MiB pitched, 3 + 5 MiB pinned, 4 MiB by cuMemCreate\n");
  return 0;
}
