/* stand_in_linked.c: a program linked at build time against libcuda.so.1 (the stand-in, stand_in_cuda.c),
 * as a CUDA C program built with -lcuda is: its calls bind to the versioned exports. Allocates, writes,
 * frees; prints what the driver counted. Exits 0 when every call succeeded. */
#include <stdio.h>
#include <string.h>

int cuInit(unsigned flags);
int cuMemAlloc_v2(unsigned long long* ptr, size_t size);
int cuMemFree_v2(unsigned long long ptr);
int cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes);

int main(void) {
  size_t before = 0, after = 0, total = 0;
  unsigned long long ptr = 0;
  if (cuInit(0) != 0 || cuMemGetInfo_v2(&before, &total) != 0 || cuMemAlloc_v2(&ptr, 5u << 20) != 0) return 1;
  memset((void*)(size_t)ptr, 0, 5u << 20);
  if (cuMemGetInfo_v2(&after, &total) != 0) return 1;
  printf("linked: allocated %zu bytes\n", before - after);
  return cuMemFree_v2(ptr) == 0 ? 0 : 1;
}
