/* demo.c: what the caching allocator does, step by step, through the C API.
 * Runs on the GPU where there is one, and on the host backend (emulated device) otherwise. */
#include <stdio.h>
#include <stdlib.h>

#include <tracepool/tracepool.h>

#define MiB (1024.0 * 1024.0)

static void check(int rc, const char* what) {
  if (rc == TRACEPOOL_OK) return;
  fprintf(stderr, "demo: %s failed: %s: %s\n", what, tracepool_status_string(rc), tracepool_last_error());
  exit(1);
}

static void show(tracepool_t* tp, const char* when) {
  tracepool_stats_t s = {.size = sizeof s};
  check(tracepool_get_stats(tp, 0, &s), "get_stats");
  printf("  %-34s allocated %8.2f MiB in %5llu blocks | reserved %8.2f MiB in %3llu segments | cached %8.2f MiB\n",
         when, s.allocated_bytes.current / MiB, (unsigned long long)s.allocation.current,
         s.reserved_bytes.current / MiB, (unsigned long long)s.segment.current,
         (s.reserved_bytes.current - s.allocated_bytes.current) / MiB);
}

int main(void) {
  tracepool_t* tp = tracepool_default();
  if (tp == NULL) {
    fprintf(stderr, "demo: tracepool_default failed: %s\n", tracepool_last_error());
    return 1;
  }
  printf("tracepool demo on the %s backend (TRACEPOOL_CONF=%s)\n", tracepool_backend_name(tp),
         getenv("TRACEPOOL_CONF") ? getenv("TRACEPOOL_CONF") : "");

  printf("1. 1000 allocations of 4 KiB to 4 MiB on the default stream:\n");
  enum { n = 1000 };
  static void* blocks[n];
  for (int i = 0; i < n; ++i) check(tracepool_malloc(tp, (size_t)4096 << (i % 11), 0, NULL, &blocks[i]), "malloc");
  show(tp, "after allocating");

  printf("2. free every other block: the memory stays cached, nvidia-smi would still count it:\n");
  for (int i = 0; i < n; i += 2) check(tracepool_free(tp, blocks[i], NULL), "free");
  show(tp, "after freeing half");

  printf("3. allocate the same sizes again: served from the cache, no new segment:\n");
  tracepool_stats_t before = {.size = sizeof before}, after = {.size = sizeof after};
  check(tracepool_get_stats(tp, 0, &before), "get_stats");
  for (int i = 0; i < n; i += 2) check(tracepool_malloc(tp, (size_t)4096 << (i % 11), 0, NULL, &blocks[i]), "malloc");
  check(tracepool_get_stats(tp, 0, &after), "get_stats");
  printf("  device allocations during step 3: %llu\n",
         (unsigned long long)(after.num_device_alloc - before.num_device_alloc));
  show(tp, "after reallocating");

  printf("4. free everything, then empty_cache gives the segments back to the device:\n");
  for (int i = 0; i < n; ++i) check(tracepool_free(tp, blocks[i], NULL), "free");
  show(tp, "after freeing all");
  check(tracepool_empty_cache(tp, 0), "empty_cache");
  show(tp, "after empty_cache");

  printf("5. misuse is refused with a reason, and nothing is lost:\n");
  void* p = NULL;
  check(tracepool_malloc(tp, 1 << 20, 0, NULL, &p), "malloc");
  check(tracepool_free(tp, p, NULL), "free");
  int rc = tracepool_free(tp, p, NULL);
  printf("  double free   -> %s\n                   %s\n", tracepool_status_string(rc), tracepool_last_error());
  rc = tracepool_malloc(tp, 64, 7, NULL, &p);
  printf("  device 7      -> %s\n                   %s\n", tracepool_status_string(rc), tracepool_last_error());

  printf("6. a 1 GiB limit, then a 2 GiB request: a clean out-of-memory error:\n");
  check(tracepool_set_limit(tp, 0, (size_t)1 << 30), "set_limit");
  rc = tracepool_malloc(tp, (size_t)2 << 30, 0, NULL, &p);
  printf("  2 GiB         -> %s\n                   %s\n", tracepool_status_string(rc), tracepool_last_error());
  check(tracepool_set_limit(tp, 0, 0), "set_limit");

  tracepool_stats_t s = {.size = sizeof s};
  check(tracepool_get_stats(tp, 0, &s), "get_stats");
  printf("totals: %llu allocations, peak allocated %.2f MiB, peak reserved %.2f MiB, %llu device allocations, "
         "%llu OOMs, %llu invalid frees\n",
         (unsigned long long)s.allocation.allocated, s.allocated_bytes.peak / MiB, s.reserved_bytes.peak / MiB,
         (unsigned long long)s.num_device_alloc, (unsigned long long)s.num_ooms,
         (unsigned long long)s.num_invalid_frees);
  check(tracepool_validate(tp), "validate");
  printf("invariants hold.\n");
  return 0;
}
